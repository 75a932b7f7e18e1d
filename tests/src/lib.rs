//! Cross-crate integration and snapshot tests live in `tests/`.
