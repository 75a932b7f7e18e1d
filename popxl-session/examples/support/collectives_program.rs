//! A program of every replica collective, shared by `mpi_check` (under
//! `mpirun`) and the `processes` tests (threads as processes): all-reduce
//! (add), all-gather and reduce-scatter (mean) of each replica's `[6]` float
//! input over 4 replicas, each result stored per replica.

use popxl::ops::collectives::{self, AllGatherShape, CollectiveOp};
use popxl::{DeviceToHostStream, HostToDeviceStream, Ir};

/// Replicas of the program.
pub const REPLICAS: usize = 4;

/// The program, its input stream and its output streams (`sum`, `all`,
/// `shard`); with `instances` `(rank, processes)`, split between processes.
pub fn program(instances: Option<(usize, usize)>) -> popxl::Result<(Ir, HostToDeviceStream, Vec<DeviceToHostStream>)> {
    let ir = Ir::new();
    ir.set_replication_factor(REPLICAS)?;
    if let Some((index, count)) = instances {
        ir.set_instances(index, count)?;
    }
    let (x, outs) = ir.main_graph().with(|| -> popxl::Result<_> {
        let x = popxl::h2d_stream([6], popxl::float32, "x")?;
        let t = popxl::ops::host_load(&x, "t")?;
        let sum = collectives::replicated_all_reduce(&t, CollectiveOp::Add, None)?;
        let all = collectives::replicated_all_gather(&t, 0, None, AllGatherShape::Concat)?;
        let shard = collectives::replicated_reduce_scatter(&t, CollectiveOp::Mean, None, false)?;
        let mut outs = Vec::new();
        for (name, y) in [("sum", sum), ("all", all), ("shard", shard)] {
            let s = popxl::d2h_stream(y.shape(), y.dtype(), name)?;
            popxl::ops::host_store(&s, &y)?;
            outs.push(s);
        }
        Ok((x, outs))
    })?;
    Ok((ir, x, outs))
}
