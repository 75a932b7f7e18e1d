//! Op attributes: a small ordered map of typed values.

use std::fmt;

use crate::{DataType, GraphId};

/// One attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A signed integer.
    Int(i64),
    /// A float (stored as f64).
    Float(f64),
    /// A list of integers (axes, shapes, permutations...).
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f64>),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A data type.
    DType(DataType),
    /// A called graph (subgraph ops).
    Graph(GraphId),
}

impl fmt::Display for AttrValue {
    /// Strings are quoted with [`crate::text::quote`]; graph values print as their id
    /// (the IR text form prints graph names instead).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(i) => write!(f, "{i}"),
            AttrValue::Float(x) => write!(f, "{x:?}"),
            AttrValue::Ints(v) => write!(f, "{v:?}"),
            AttrValue::Floats(v) => write!(f, "{v:?}"),
            AttrValue::Str(s) => f.write_str(&crate::text::quote(s)),
            AttrValue::Bool(b) => write!(f, "{b}"),
            AttrValue::DType(d) => write!(f, "{d}"),
            AttrValue::Graph(g) => write!(f, "{g:?}"),
        }
    }
}

/// Attributes of an op, kept sorted by key so printing and comparison are stable.
///
/// ```
/// use popart_ir::{AttrValue, Attributes};
/// let attrs = Attributes::new().with("axis", AttrValue::Int(1)).with("keepdims", AttrValue::Bool(false));
/// assert_eq!(attrs.int("axis"), Some(1));
/// assert_eq!(attrs.keys().collect::<Vec<_>>(), vec!["axis", "keepdims"]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes {
    entries: Vec<(String, AttrValue)>,
}

impl Attributes {
    /// No attributes.
    pub fn new() -> Self {
        Attributes { entries: Vec::new() }
    }

    /// Builder form of [`Attributes::set`].
    pub fn with(mut self, key: &str, value: AttrValue) -> Self {
        self.set(key, value);
        self
    }

    /// Set `key` to `value`, replacing an existing value.
    pub fn set(&mut self, key: &str, value: AttrValue) {
        match self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
            Ok(i) => self.entries[i].1 = value,
            Err(i) => self.entries.insert(i, (key.to_string(), value)),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&AttrValue> {
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok().map(|i| &self.entries[i].1)
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<AttrValue> {
        let i = self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        Some(self.entries.remove(i).1)
    }

    /// Keys in sorted order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// (key, value) pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttrValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no attributes.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// An integer attribute (bools read as 0/1).
    pub fn int(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            AttrValue::Int(i) => Some(*i),
            AttrValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// A float attribute (integers are converted).
    pub fn float(&self, key: &str) -> Option<f64> {
        match self.get(key)? {
            AttrValue::Float(x) => Some(*x),
            AttrValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// A list-of-integers attribute.
    pub fn ints(&self, key: &str) -> Option<&[i64]> {
        match self.get(key)? {
            AttrValue::Ints(v) => Some(v),
            _ => None,
        }
    }

    /// A list-of-floats attribute.
    pub fn floats(&self, key: &str) -> Option<&[f64]> {
        match self.get(key)? {
            AttrValue::Floats(v) => Some(v),
            _ => None,
        }
    }

    /// A string attribute.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A boolean attribute.
    pub fn bool(&self, key: &str) -> Option<bool> {
        match self.get(key)? {
            AttrValue::Bool(b) => Some(*b),
            AttrValue::Int(i) => Some(*i != 0),
            _ => None,
        }
    }

    /// A data type attribute.
    pub fn dtype(&self, key: &str) -> Option<DataType> {
        match self.get(key)? {
            AttrValue::DType(d) => Some(*d),
            _ => None,
        }
    }

    /// A graph attribute.
    pub fn graph(&self, key: &str) -> Option<GraphId> {
        match self.get(key)? {
            AttrValue::Graph(g) => Some(*g),
            _ => None,
        }
    }

    /// Every graph referenced by the attributes, in key order.
    pub fn graphs(&self) -> impl Iterator<Item = GraphId> + '_ {
        self.entries.iter().filter_map(|(_, v)| match v {
            AttrValue::Graph(g) => Some(*g),
            _ => None,
        })
    }
}
