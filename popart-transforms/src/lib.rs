//! Graph transforms and patterns over `popart-ir`.
