//! Graphviz DOT export.
