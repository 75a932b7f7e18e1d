//! Lowering of a prepared IR into device programs and a memory plan.
