//! Where an op runs: PopART's virtual graph id (the IPU) and tile set, set by
//! PopXL's `ipu(n)` and `io_tiles()` contexts.
//!
//! Placement is an annotation: it is printed in the text IR and kept by
//! passes, but the `cpu` device ignores it (every op runs on the host). The
//! `ipu_model` device reads it to put each buffer on its IPU's tiles, and
//! [`Ir::num_ipus`] counts the IPUs a program needs from it.

use std::fmt;

use crate::{Ir, IrError, Result};

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

/// Where an op that moves tensors between IPUs reads its inputs and writes its
/// outputs (PopART's in and out "introspection" virtual graph ids of
/// `IpuCopyOp`), as its [`crate::OpDef::ipu_route`] gives them.
///
/// ```
/// use popart_ir::{ops::all::IpuCopy, AttrValue, Attributes, IpuRoute, OpDef};
/// let attrs = Attributes::new().with("source", AttrValue::Int(0)).with("destination", AttrValue::Int(3));
/// assert_eq!(IpuCopy.ipu_route(&attrs), Some(IpuRoute { source: 0, destination: 3 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpuRoute {
    /// The IPU the inputs are on.
    pub source: u32,
    /// The IPU the outputs are written on.
    pub destination: u32,
}

impl Ir {
    /// The IPUs one replica spans (PopXL's `Session._get_ipus_per_replica`):
    /// one more than the largest IPU any op of any graph uses, counting each
    /// op's placement and both ends of an [`IpuRoute`] (`IpuCopy`). Ops without
    /// an IPU count as IPU 0, so an IR without `ipu(n)` placements (or without
    /// ops) needs one IPU per replica; PopXL refuses an IR with no ops at all.
    ///
    /// ```
    /// let mut ir = popart_ir::Ir::new();
    /// assert_eq!(ir.ipus_per_replica(), 1);
    /// ```
    pub fn ipus_per_replica(&self) -> u64 {
        let mut max = 0u32;
        for g in self.graphs() {
            for op in g.ops() {
                let route = op.def().ipu_route(&op.attrs);
                for ipu in
                    [op.placement.ipu, route.map(|r| r.source), route.map(|r| r.destination)].into_iter().flatten()
                {
                    max = max.max(ipu);
                }
            }
        }
        u64::from(max) + 1
    }

    /// The number of IPUs a session of this IR needs (PopXL's
    /// `Session._get_ipu_count`): `2^ceil(log2(ipus_per_replica *
    /// replication_factor))`, the IPUs of every replica rounded up to a power
    /// of two (devices come in powers of two). See [`Ir::ipus_per_replica`].
    ///
    /// Errors: a `replication_factor` of 0 ([`IrError::ZeroSetting`]); a count
    /// that does not fit in 64 bits ([`IrError::TooManyIpus`]).
    ///
    /// ```
    /// use popart_ir::{AttrValue, Attributes, DataType, Ir, Placement, TensorInfo};
    /// let mut ir = Ir::new();
    /// let main = ir.main_graph_id();
    /// let x = ir.main_graph_mut().add_input("x", TensorInfo::new(DataType::Float32, [2])).unwrap();
    /// let relu = ir.create_op(main, "Relu", Attributes::new(), &[(0, x)], "relu").unwrap();
    /// assert_eq!(ir.num_ipus().unwrap(), 1);
    /// // An op on IPU 2: three IPUs per replica, rounded up to four.
    /// ir.main_graph_mut().set_op_placement(relu, Placement { ipu: Some(2), ..Placement::default() }).unwrap();
    /// assert_eq!((ir.ipus_per_replica(), ir.num_ipus().unwrap()), (3, 4));
    /// // Two replicas of three IPUs: eight.
    /// ir.replication_factor = 2;
    /// assert_eq!(ir.num_ipus().unwrap(), 8);
    /// ```
    pub fn num_ipus(&self) -> Result<u64> {
        if self.replication_factor == 0 {
            return Err(IrError::ZeroSetting { setting: "replication_factor" });
        }
        let per_replica = self.ipus_per_replica();
        let too_many =
            || IrError::TooManyIpus { ipus_per_replica: per_replica, replication_factor: self.replication_factor };
        let rf = u64::try_from(self.replication_factor).map_err(|_| too_many())?;
        per_replica.checked_mul(rf).and_then(u64::checked_next_power_of_two).ok_or_else(too_many)
    }
}
