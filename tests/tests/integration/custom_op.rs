//! The `custom_op` example, run as a test: a custom op (leaky ReLU) registered from
//! outside the library crates, differentiated, run in a session, rewritten by a
//! custom pattern and round-tripped through the text form, all checked against
//! reference values computed in the example (it returns an error on a mismatch).

#[allow(clippy::module_inception)]
#[path = "../../../popxl-session/examples/custom_op.rs"]
mod custom_op;

#[test]
fn custom_op_example_checks_out() {
    custom_op::main().expect("the custom_op example's checks");
}

// Custom ops whose alias declarations do not fit their tensors are refused when a
// session is built: `popxl-session/tests/integration/custom_op_declarations.rs`.
