//! Integration tests of the popxl facade: one test binary, a module per topic (`cargo test -p popxl --test integration <module>::`).

mod building;
mod checkpoint;
mod errors;
mod graphs;
mod ops;
mod typed_attrs;
