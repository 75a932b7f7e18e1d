//! Integration tests of the transforms: one test binary, a module per topic (`cargo test -p popart-transforms --test integration <module>::`).

mod autodiff_structure;
mod fuse_weight_update;
mod transform_errors;
