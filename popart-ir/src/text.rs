//! The stable, readable text form of a whole IR, and its parser (round trip).
