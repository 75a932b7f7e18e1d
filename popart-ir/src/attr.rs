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

/// The kind of value an attribute holds (one per [`AttrValue`] variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttrKind {
    /// [`AttrValue::Int`].
    Int,
    /// [`AttrValue::Float`] (an [`AttrValue::Int`] is accepted and converted).
    Float,
    /// [`AttrValue::Ints`].
    Ints,
    /// [`AttrValue::Floats`].
    Floats,
    /// [`AttrValue::Str`].
    Str,
    /// [`AttrValue::Bool`].
    Bool,
    /// [`AttrValue::DType`].
    DType,
    /// [`AttrValue::Graph`].
    Graph,
}

impl AttrKind {
    /// True if `value` is of this kind (an integer is a valid float).
    pub fn accepts(self, value: &AttrValue) -> bool {
        value.kind() == self || (self == AttrKind::Float && matches!(value, AttrValue::Int(_)))
    }

    /// A value of another kind than this one (for tests of the attribute checks).
    pub fn wrong_value(self) -> AttrValue {
        match self {
            AttrKind::Str => AttrValue::Int(1),
            _ => AttrValue::Str("wrong".into()),
        }
    }
}

impl fmt::Display for AttrKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttrKind::Int => "an integer",
            AttrKind::Float => "a float",
            AttrKind::Ints => "a list of integers",
            AttrKind::Floats => "a list of floats",
            AttrKind::Str => "a string",
            AttrKind::Bool => "a bool",
            AttrKind::DType => "a data type",
            AttrKind::Graph => "a graph",
        })
    }
}

impl AttrValue {
    /// The kind of this value.
    pub fn kind(&self) -> AttrKind {
        match self {
            AttrValue::Int(_) => AttrKind::Int,
            AttrValue::Float(_) => AttrKind::Float,
            AttrValue::Ints(_) => AttrKind::Ints,
            AttrValue::Floats(_) => AttrKind::Floats,
            AttrValue::Str(_) => AttrKind::Str,
            AttrValue::Bool(_) => AttrKind::Bool,
            AttrValue::DType(_) => AttrKind::DType,
            AttrValue::Graph(_) => AttrKind::Graph,
        }
    }
}

/// One declared attribute of an op type: its name, kind and whether it must be
/// given (see [`crate::OpDef::attributes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    /// The attribute's key.
    pub name: &'static str,
    /// The kind of its value.
    pub kind: AttrKind,
    /// True if the op cannot be created without it.
    pub required: bool,
}

impl AttrSpec {
    /// True if `key` is this attribute: its name, or for a name ending in `#`
    /// (an indexed family such as `shape#`), the name's stem followed by a
    /// decimal index (`shape0`, `shape1`...).
    pub fn matches(&self, key: &str) -> bool {
        match self.name.strip_suffix('#') {
            Some(stem) => {
                key.strip_prefix(stem).is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            }
            None => self.name == key,
        }
    }

    /// A key of this attribute (for an indexed family, its index 0).
    pub fn example_key(&self) -> String {
        match self.name.strip_suffix('#') {
            Some(stem) => format!("{stem}0"),
            None => self.name.to_string(),
        }
    }
}

/// What is wrong with an op's attributes (wrapped with the op's name and type in
/// [`crate::IrError::Attribute`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AttrError {
    /// A key the op type does not declare.
    #[error("unknown attribute `{attr}` (this op type has {})", names(.declared))]
    Unknown {
        /// The key given.
        attr: String,
        /// The keys the op type declares.
        declared: Vec<&'static str>,
    },
    /// A value of the wrong kind.
    #[error("attribute `{attr}` must be {expected}, got `{got}`")]
    WrongKind {
        /// The key.
        attr: String,
        /// The declared kind.
        expected: AttrKind,
        /// The value given.
        got: AttrValue,
    },
    /// A value of the right kind outside the accepted range or set.
    #[error("attribute `{attr}` must be {expected}, got `{got}`")]
    OutOfRange {
        /// The key.
        attr: String,
        /// The accepted values, in words.
        expected: &'static str,
        /// The value given.
        got: AttrValue,
    },
    /// A required attribute that is absent.
    #[error("missing attribute `{attr}` ({expected})")]
    Missing {
        /// The key.
        attr: String,
        /// The declared kind.
        expected: AttrKind,
    },
}

fn names(declared: &[&'static str]) -> String {
    if declared.is_empty() {
        "no attributes".to_string()
    } else {
        format!("attributes {}", declared.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
    }
}

/// Check `attrs` against a schema: every key declared, of its declared kind,
/// every required key present.
pub fn check_schema(schema: &[AttrSpec], attrs: &Attributes) -> Result<(), AttrError> {
    for (key, value) in attrs.iter() {
        let Some(spec) = schema.iter().find(|s| s.matches(key)) else {
            return Err(AttrError::Unknown {
                attr: key.to_string(),
                declared: schema.iter().map(|s| s.name).collect(),
            });
        };
        if !spec.kind.accepts(value) {
            return Err(AttrError::WrongKind { attr: key.to_string(), expected: spec.kind, got: value.clone() });
        }
    }
    if let Some(spec) = schema.iter().find(|s| s.required && attrs.get(s.name).is_none()) {
        return Err(AttrError::Missing { attr: spec.name.to_string(), expected: spec.kind });
    }
    Ok(())
}

/// A Rust type an attribute value decodes to (the field types of
/// [`op_attrs!`](crate::op_attrs)).
pub trait AttrType: Sized {
    /// The kind of value it is stored as.
    const KIND: AttrKind;
    /// True for `Option<T>`: the attribute may be absent.
    const OPTIONAL: bool = false;
    /// The accepted values in words, for a value of the right kind that
    /// [`AttrType::from_value`] refuses (an unknown name).
    const EXPECTED: &'static str = "a valid value";
    /// The value, if `value` is of [`AttrType::KIND`].
    fn from_value(value: &AttrValue) -> Option<Self>;
    /// The stored value (`None`: the attribute is left out).
    fn to_value(&self) -> Option<AttrValue>;
    /// The value of an absent optional attribute.
    fn absent() -> Option<Self> {
        None
    }
}

macro_rules! attr_type {
    ($ty:ty, $kind:ident, |$v:ident| $from:expr, |$s:ident| $to:expr) => {
        impl AttrType for $ty {
            const KIND: AttrKind = AttrKind::$kind;
            fn from_value(value: &AttrValue) -> Option<Self> {
                match value {
                    AttrValue::$kind($v) => Some($from),
                    _ => None,
                }
            }
            fn to_value(&self) -> Option<AttrValue> {
                let $s = self;
                Some(AttrValue::$kind($to))
            }
        }
    };
}
attr_type!(i64, Int, |v| *v, |s| *s);
attr_type!(Vec<i64>, Ints, |v| v.clone(), |s| s.clone());
attr_type!(Vec<f64>, Floats, |v| v.clone(), |s| s.clone());
attr_type!(String, Str, |v| v.clone(), |s| s.clone());
attr_type!(bool, Bool, |v| *v, |s| *s);
attr_type!(DataType, DType, |v| *v, |s| *s);
attr_type!(GraphId, Graph, |v| *v, |s| *s);

impl AttrType for f64 {
    const KIND: AttrKind = AttrKind::Float;
    fn from_value(value: &AttrValue) -> Option<Self> {
        match value {
            AttrValue::Float(x) => Some(*x),
            AttrValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Float(*self))
    }
}

/// A count or size: an integer that is not negative.
impl AttrType for usize {
    const KIND: AttrKind = AttrKind::Int;
    const EXPECTED: &'static str = "a non-negative integer";
    fn from_value(value: &AttrValue) -> Option<Self> {
        match value {
            AttrValue::Int(i) => usize::try_from(*i).ok(),
            _ => None,
        }
    }
    fn to_value(&self) -> Option<AttrValue> {
        // Values decoded from an attribute fit; a larger one saturates.
        Some(AttrValue::Int(i64::try_from(*self).unwrap_or(i64::MAX)))
    }
}

/// One character, stored as a one-character string.
impl AttrType for char {
    const KIND: AttrKind = AttrKind::Str;
    const EXPECTED: &'static str = "exactly one character";
    fn from_value(value: &AttrValue) -> Option<Self> {
        match value {
            AttrValue::Str(s) => {
                let mut cs = s.chars();
                cs.next().filter(|_| cs.next().is_none())
            }
            _ => None,
        }
    }
    fn to_value(&self) -> Option<AttrValue> {
        Some(AttrValue::Str(self.to_string()))
    }
}

impl<T: AttrType> AttrType for Option<T> {
    const KIND: AttrKind = T::KIND;
    const EXPECTED: &'static str = T::EXPECTED;
    const OPTIONAL: bool = true;
    fn from_value(value: &AttrValue) -> Option<Self> {
        T::from_value(value).map(Some)
    }
    fn to_value(&self) -> Option<AttrValue> {
        self.as_ref().and_then(T::to_value)
    }
    fn absent() -> Option<Self> {
        Some(None)
    }
}

/// Read one declared field (used by [`op_attrs!`](crate::op_attrs)).
#[doc(hidden)]
pub fn decode_field<T: AttrType>(attrs: &Attributes, key: &str, default: Option<T>) -> Result<T, AttrError> {
    match attrs.get(key) {
        Some(v) => T::from_value(v).ok_or_else(|| {
            if T::KIND.accepts(v) {
                AttrError::OutOfRange { attr: key.to_string(), expected: T::EXPECTED, got: v.clone() }
            } else {
                AttrError::WrongKind { attr: key.to_string(), expected: T::KIND, got: v.clone() }
            }
        }),
        None => {
            default.or_else(T::absent).ok_or_else(|| AttrError::Missing { attr: key.to_string(), expected: T::KIND })
        }
    }
}

/// The typed attributes of an op type, declared with
/// [`op_attrs!`](crate::op_attrs): decoded and validated from an op's
/// [`Attributes`] in one place, encoded back for the text form.
pub trait OpAttrs: Sized {
    /// The declared attributes (an op type's [`crate::OpDef::attributes`]).
    const SCHEMA: &'static [AttrSpec];
    /// Decode and validate (kinds, ranges, unknown keys).
    fn from_attrs(attrs: &Attributes) -> Result<Self, AttrError>;
    /// The attribute map of these values (every field but absent optional ones).
    fn to_attrs(&self) -> Attributes;
    /// The values of an op given no attributes (every field's declared default;
    /// an error names a required field).
    fn defaults() -> Result<Self, AttrError> {
        Self::from_attrs(&Attributes::new())
    }
    /// Decode the attributes of `op`; errors name the op.
    fn of(op: &crate::Op) -> crate::Result<Self> {
        Self::from_attrs(&op.attrs).map_err(|error| crate::IrError::Attribute {
            op: op.name.clone(),
            op_type: op.op_type().to_string(),
            error: Box::new(error),
        })
    }
    /// Decode the attributes of the op being inferred; errors name the op.
    fn infer(ctx: &crate::InferContext<'_>) -> crate::Result<Self> {
        Self::from_attrs(ctx.attrs).map_err(|e| ctx.attr_error(e))
    }
}

/// Declare the typed attributes of an op type: a struct with one field per
/// attribute and its [`OpAttrs`] implementation (schema, decode, encode). A
/// field with `= default` is optional, one without is required, an `Option<T>`
/// field may be absent. `key "name"` sets a key that is not a Rust identifier.
/// An optional `validate = path;` names a `fn(&Self) -> Result<(), AttrError>`
/// run after decoding (range checks). Usable from any crate (custom ops).
///
/// ```
/// use popart_ir::{op_attrs, AttrError, AttrValue, Attributes, OpAttrs};
/// op_attrs! {
///     /// Attributes of a cumulative sum.
///     #[derive(Clone, Debug, PartialEq)]
///     pub struct ScanAttrs {
///         /// The axis.
///         pub axis: i64 = 0,
///         /// Leave each element out of its sum.
///         pub exclusive: bool = false,
///         /// The scale (required).
///         pub scale: f64,
///         /// An optional label.
///         pub label: Option<String> = None,
///     }
///     validate = |a: &ScanAttrs| if a.scale > 0.0 { Ok(()) } else {
///         Err(AttrError::OutOfRange { attr: "scale".into(), expected: "positive", got: AttrValue::Float(a.scale) })
///     };
/// }
/// let a = ScanAttrs::from_attrs(&Attributes::new().with("scale", AttrValue::Int(2))).unwrap();
/// assert_eq!(a, ScanAttrs { axis: 0, exclusive: false, scale: 2.0, label: None });
/// assert_eq!(ScanAttrs::from_attrs(&a.to_attrs()).unwrap(), a);
/// assert!(ScanAttrs::from_attrs(&Attributes::new()).is_err()); // scale missing
/// let bad = a.to_attrs().with("axis", AttrValue::Bool(true));
/// assert!(matches!(ScanAttrs::from_attrs(&bad), Err(AttrError::WrongKind { .. })));
/// ```
#[macro_export]
macro_rules! op_attrs {
    (
        $(#[$m:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fm:meta])* $fvis:vis $field:ident $(key $key:literal)? : $ty:ty $(= $default:expr)? ),* $(,)?
        }
        $(validate = $validate:expr;)?
    ) => {
        $(#[$m])*
        $vis struct $name {
            $( $(#[$fm])* $fvis $field: $ty, )*
        }

        impl $crate::OpAttrs for $name {
            const SCHEMA: &'static [$crate::AttrSpec] = &[
                $( $crate::AttrSpec {
                    name: $crate::op_attrs!(@key $field $($key)?),
                    kind: <$ty as $crate::AttrType>::KIND,
                    required: !<$ty as $crate::AttrType>::OPTIONAL && $crate::op_attrs!(@required $($default)?),
                }, )*
            ];
            fn from_attrs(attrs: &$crate::Attributes) -> ::std::result::Result<Self, $crate::AttrError> {
                $crate::check_schema(Self::SCHEMA, attrs)?;
                let value = $name {
                    $( $field: $crate::decode_field::<$ty>(
                        attrs,
                        $crate::op_attrs!(@key $field $($key)?),
                        $crate::op_attrs!(@default $($default)?),
                    )?, )*
                };
                $( ($validate)(&value)?; )?
                Ok(value)
            }
            fn to_attrs(&self) -> $crate::Attributes {
                let mut attrs = $crate::Attributes::new();
                $( if let Some(v) = $crate::AttrType::to_value(&self.$field) {
                    attrs.set($crate::op_attrs!(@key $field $($key)?), v);
                } )*
                attrs
            }
        }
    };
    (@key $field:ident) => { stringify!($field) };
    (@key $field:ident $key:literal) => { $key };
    (@required) => { true };
    (@required $default:expr) => { false };
    (@default) => { None };
    (@default $default:expr) => { Some($default) };
}

/// Declare an enum stored as a string attribute: its variants and their names,
/// `from_name`/`name`, and its [`AttrType`] (an unknown name is a wrong value,
/// reported as [`AttrError::WrongKind`] naming the accepted kind). Usable from
/// any crate.
///
/// ```
/// popart_ir::attr_enum! {
///     /// A reduction.
///     pub enum Red { /// Mean.
///         Mean = "mean", /// Sum.
///         Sum = "sum" }
/// }
/// assert_eq!(Red::from_name("sum"), Some(Red::Sum));
/// assert_eq!(Red::Mean.name(), "mean");
/// ```
#[macro_export]
macro_rules! attr_enum {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($(#[$vm:meta])* $variant:ident = $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name { $($(#[$vm])* $variant),* }

        impl $name {
            /// Every variant's name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($s),*];
            /// The variant of a name.
            pub fn from_name(s: &str) -> Option<Self> {
                match s { $($s => Some(Self::$variant),)* _ => None }
            }
            /// The variant's name (its attribute value).
            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => $s),* }
            }
        }

        impl $crate::AttrType for $name {
            const KIND: $crate::AttrKind = $crate::AttrKind::Str;
            const EXPECTED: &'static str = concat!("one of" $(, " ", $s)*);
            fn from_value(value: &$crate::AttrValue) -> Option<Self> {
                match value { $crate::AttrValue::Str(s) => Self::from_name(s), _ => None }
            }
            fn to_value(&self) -> Option<$crate::AttrValue> {
                Some($crate::AttrValue::Str(self.name().to_string()))
            }
        }
    };
}
