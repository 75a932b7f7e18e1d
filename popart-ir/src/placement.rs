//! Where an op runs: PopART's virtual graph id (the IPU) and tile set, set by
//! PopXL's `ipu(n)` and `io_tiles()` contexts.
//!
//! Placement is an annotation: it is printed in the text IR and kept by
//! passes, but the `cpu` device ignores it (every op runs on the host).

use std::fmt;

/// The tile set of an op: compute tiles (the default) or IO tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TileSet {
    /// The tiles that run compute (PopART's `TileSet::Compute`).
    #[default]
    Compute,
    /// The IO tiles, which overlap host and remote transfers with compute.
    Io,
}

impl TileSet {
    /// The name used by PopXL and the text IR: `compute` or `io`.
    ///
    /// ```
    /// assert_eq!(popart_ir::TileSet::Io.name(), "io");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            TileSet::Compute => "compute",
            TileSet::Io => "io",
        }
    }

    /// The tile set named `name` (`compute` or `io`).
    ///
    /// ```
    /// assert_eq!(popart_ir::TileSet::parse("io"), Some(popart_ir::TileSet::Io));
    /// ```
    pub fn parse(name: &str) -> Option<TileSet> {
        match name {
            "compute" => Some(TileSet::Compute),
            "io" => Some(TileSet::Io),
            _ => None,
        }
    }
}

impl fmt::Display for TileSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An op's placement. The default (no IPU, compute tiles) is not printed.
///
/// ```
/// use popart_ir::{Placement, TileSet};
/// let p = Placement { ipu: Some(1), tile_set: TileSet::Io };
/// assert_eq!(p.to_string(), "ipu=1, tiles=io");
/// assert!(Placement::default().is_default());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Placement {
    /// The IPU (PopART's virtual graph id), if set.
    pub ipu: Option<u32>,
    /// The tile set.
    pub tile_set: TileSet,
}

impl Placement {
    /// True for no IPU and compute tiles.
    pub fn is_default(&self) -> bool {
        *self == Placement::default()
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(i) = self.ipu {
            parts.push(format!("ipu={i}"));
        }
        if self.tile_set != TileSet::Compute {
            parts.push(format!("tiles={}", self.tile_set));
        }
        f.write_str(&parts.join(", "))
    }
}
