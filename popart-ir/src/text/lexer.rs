//! Tokens of one line of text, names and string escapes.

use std::fmt::{self, Write as _};

use crate::{IrError, Result};

/// `s` as a double-quoted string of the [text form](super): `"` and `\` get a
/// backslash, newline, carriage return and tab are written `\n`, `\r` and `\t`,
/// any other control character `\u{HEX}`, everything else is kept as is. The text
/// parser reads the result back to `s` exactly. It is the one quoting of the
/// workspace: names and attribute strings in the text form, strings of
/// [Graphviz DOT](crate::dot) output and names in `popart-lower`'s program dump.
///
/// ```
/// use popart_ir::text::quote;
/// assert_eq!(quote("plain"), r#""plain""#);
/// assert_eq!(quote("a \"b\"\n\\c\u{1}"), r#""a \"b\"\n\\c\u{1}""#);
/// ```
pub fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(q, "\\u{{{:x}}}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// Characters of a bare word (a name printed without quotes).
pub(super) fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '+' | '-')
}

/// A token of one line.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    /// A bare word.
    Word(String),
    /// A quoted string, unescaped.
    Str(String),
    /// One of `[ ] { } ( ) = , @`.
    Punct(char),
    /// `->`
    Arrow,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Word(w) => write!(f, "`{w}`"),
            Tok::Str(s) => write!(f, "string {}", quote(s)),
            Tok::Punct(c) => write!(f, "`{c}`"),
            Tok::Arrow => f.write_str("`->`"),
        }
    }
}

pub(super) fn perr(line: usize, message: impl Into<String>) -> IrError {
    IrError::Parse { line, message: message.into() }
}

pub(super) fn tokenize(line: usize, s: &str) -> Result<Vec<Tok>> {
    let mut toks = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '-' && s[start..].starts_with("->") {
            chars.next();
            chars.next();
            toks.push(Tok::Arrow);
        } else if is_word_char(c) {
            let mut end = start;
            while let Some(&(i, c)) = chars.peek() {
                if !is_word_char(c) || (c == '-' && s[i..].starts_with("->")) {
                    break;
                }
                end = i + c.len_utf8();
                chars.next();
            }
            toks.push(Tok::Word(s[start..end].to_string()));
        } else if c == '"' {
            chars.next();
            let mut v = String::new();
            loop {
                let Some((_, c)) = chars.next() else {
                    return Err(perr(line, "unterminated string"));
                };
                match c {
                    '"' => break,
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('"') => v.push('"'),
                        Some('\\') => v.push('\\'),
                        Some('n') => v.push('\n'),
                        Some('r') => v.push('\r'),
                        Some('t') => v.push('\t'),
                        Some('u') => {
                            if chars.next().map(|(_, c)| c) != Some('{') {
                                return Err(perr(line, "expected `{` after `\\u`"));
                            }
                            let mut hex = String::new();
                            loop {
                                match chars.next().map(|(_, c)| c) {
                                    Some('}') => break,
                                    Some(h) if h.is_ascii_hexdigit() && hex.len() < 6 => hex.push(h),
                                    _ => return Err(perr(line, "bad `\\u{..}` escape")),
                                }
                            }
                            let ch = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| perr(line, format!("`\\u{{{hex}}}` is not a character")))?;
                            v.push(ch);
                        }
                        Some(other) => return Err(perr(line, format!("unknown escape `\\{other}`"))),
                        None => return Err(perr(line, "unterminated string")),
                    },
                    c => v.push(c),
                }
            }
            toks.push(Tok::Str(v));
        } else if "[]{}()=,@".contains(c) {
            chars.next();
            toks.push(Tok::Punct(c));
        } else {
            return Err(perr(line, format!("unexpected character `{c}`")));
        }
    }
    Ok(toks)
}

/// Tokens of one line, consumed from the front.
pub(super) struct Cursor {
    pub(super) line: usize,
    pub(super) toks: Vec<Tok>,
    pub(super) pos: usize,
}

impl Cursor {
    pub(super) fn err(&self, message: impl Into<String>) -> IrError {
        perr(self.line, message)
    }

    pub(super) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    pub(super) fn next(&mut self, what: &str) -> Result<Tok> {
        let t =
            self.toks.get(self.pos).cloned().ok_or_else(|| self.err(format!("expected {what}, found end of line")))?;
        self.pos += 1;
        Ok(t)
    }

    pub(super) fn at_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }

    pub(super) fn punct(&mut self, c: char) -> Result<()> {
        match self.next(&format!("`{c}`"))? {
            Tok::Punct(p) if p == c => Ok(()),
            other => Err(self.err(format!("expected `{c}`, found {other}"))),
        }
    }

    pub(super) fn keyword(&mut self, kw: &str) -> Result<()> {
        match self.next(&format!("`{kw}`"))? {
            Tok::Word(w) if w == kw => Ok(()),
            other => Err(self.err(format!("expected `{kw}`, found {other}"))),
        }
    }

    pub(super) fn word(&mut self, what: &str) -> Result<String> {
        match self.next(what)? {
            Tok::Word(w) => Ok(w),
            other => Err(self.err(format!("expected {what}, found {other}"))),
        }
    }

    /// A bare or quoted name.
    pub(super) fn name(&mut self, what: &str) -> Result<String> {
        match self.next(what)? {
            Tok::Word(w) => Ok(w),
            Tok::Str(s) => Ok(s),
            other => Err(self.err(format!("expected {what}, found {other}"))),
        }
    }

    pub(super) fn end(&self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(self.err(format!("unexpected {t} at end of line"))),
        }
    }

    /// `open item (, item)* close`, possibly empty.
    pub(super) fn list<T>(
        &mut self,
        open: char,
        close: char,
        mut item: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.punct(open)?;
        let mut v = Vec::new();
        if self.at_punct(close) {
            self.pos += 1;
            return Ok(v);
        }
        loop {
            v.push(item(self)?);
            match self.next(&format!("`,` or `{close}`"))? {
                Tok::Punct(',') => {}
                Tok::Punct(c) if c == close => return Ok(v),
                other => return Err(self.err(format!("expected `,` or `{close}`, found {other}"))),
            }
        }
    }

    pub(super) fn usize(&mut self, what: &str) -> Result<usize> {
        let w = self.word(what)?;
        w.parse().map_err(|_| self.err(format!("expected {what}, found `{w}`")))
    }
}
