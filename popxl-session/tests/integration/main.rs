//! Integration tests of the session: one test binary, a module per topic (`cargo test -p popxl-session --test integration <module>::`).

mod bad_input;
mod borrowed_io;
mod custom_op_declarations;
mod empty_tensors;
mod generation;
mod mnist_training;
mod processes;
mod resume;
