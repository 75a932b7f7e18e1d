//! Integration tests of the IR: one test binary, a module per topic (`cargo test -p popart-ir --test integration <module>::`).

mod common;
mod fuzz_text;
mod gradient_ops;
mod graph_editing;
mod op_aliases;
mod op_costs;
mod schedule;
mod text_form;
mod typed_attrs;
mod verifier;
