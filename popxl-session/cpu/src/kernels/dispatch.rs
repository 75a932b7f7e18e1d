//! Dtype dispatch: macros binding a type name to the element type of a runtime
//! [`DataType`](popart_ir::DataType), so one generic kernel is instantiated per dtype.

/// Match a dtype against `Variant: type` arms, binding `$T` to the arm's type for
/// `$body`; every other dtype evaluates `$other`. The `with_*` macros below are
/// the type tables the kernels use.
macro_rules! dispatch_dtype {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr; $($variant:ident: $ty:ty),+ $(,)?) => {{
        #[allow(unreachable_patterns)]
        match $dt {
            $(popart_ir::DataType::$variant => {
                type $T = $ty;
                $body
            })+
            _ => $other,
        }
    }};
}
pub(crate) use dispatch_dtype;

/// Dispatch on a numeric dtype (integers, f32, f64); `$other` for bool and float16.
macro_rules! with_num {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::kernels::dispatch::dispatch_dtype!($dt, $T => $body, _ => $other;
            Int8: i8, Int16: i16, Int32: i32, Int64: i64,
            Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64,
            Float32: f32, Float64: f64)
    };
}
pub(crate) use with_num;

/// Dispatch on a float dtype (f32, f64); `$other` for the rest.
macro_rules! with_float {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::kernels::dispatch::dispatch_dtype!($dt, $T => $body, _ => $other; Float32: f32, Float64: f64)
    };
}
pub(crate) use with_float;

/// Dispatch on an integer dtype usable as an index.
macro_rules! with_index {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::kernels::dispatch::dispatch_dtype!($dt, $T => $body, _ => $other;
            Int8: i8, Int16: i16, Int32: i32, Int64: i64,
            Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64)
    };
}
pub(crate) use with_index;

/// Dispatch on any dtype, binding `$T` to its element type.
macro_rules! with_any {
    ($dt:expr, $T:ident => $body:expr) => {
        $crate::kernels::dispatch::dispatch_dtype!($dt, $T => $body, _ => unreachable!("every dtype is listed");
            Bool: $crate::kernels::elem::Bool8,
            Int8: i8, Int16: i16, Int32: i32, Int64: i64,
            Uint8: u8, Uint16: u16, Uint32: u32, Uint64: u64,
            Float16: half::f16, Float32: f32, Float64: f64)
    };
}
pub(crate) use with_any;

/// Dispatch on an element size in bytes: binds `$T` to an unsigned integer of that
/// size, for kernels that only move elements.
macro_rules! with_bits {
    ($dt:expr, $T:ident => $body:expr) => {{
        match $dt.size_bytes() {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            _ => {
                type $T = u64;
                $body
            }
        }
    }};
}
pub(crate) use with_bits;

/// `bound_alias!(Name: Trait<A> + Trait<B> ...)`: a trait naming the conjunction of
/// the bounds, with the blanket impl, so a generic builder can require "this map is
/// defined for every type its dispatch macro may pick" in one word.
macro_rules! bound_alias {
    ($(#[$m:meta])* $name:ident: $tr0:ident<$($a0:ty),+> $(+ $tr:ident<$($a:ty),+>)*) => {
        $(#[$m])*
        pub(crate) trait $name: $tr0<$($a0),+> $(+ $tr<$($a),+>)* {}
        impl<F: $tr0<$($a0),+> $(+ $tr<$($a),+>)*> $name for F {}
    };
}
pub(crate) use bound_alias;
