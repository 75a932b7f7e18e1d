//! `--save` and `--resume` of the training examples: one checkpoint holds the
//! whole training state, so that training N steps equals training k steps,
//! saving, resuming in a fresh process and training N - k more, bit for bit.
//!
//! A checkpoint holds
//! - the weights, under their usual names (what `--load` reads);
//! - every other variable of the training program under its own name: the
//!   optimizer's state (momentum, Adam's moments and step counters, remote
//!   variables included) and any random-seed variable;
//! - the host's counters as `uint64` scalars named `train.<counter>`: the
//!   step, the data order (the shuffle generator's state, epoch and position)
//!   and the settings that must not change across a resume.
//!
//! Everything is read from the session once, after training; nothing is
//! added to a step.

use std::collections::HashMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use popxl::{HostArray, Ir, Tensor};
use popxl_session::Session;

type StateResult<T> = Result<T, Box<dyn Error>>;

/// The name of counter `name` in a checkpoint.
fn counter_name(name: &str) -> String {
    format!("train.{name}")
}

/// Every variable of `ir`'s main graph but `weights`, sorted by name: the
/// optimizer state, step counters and random seeds a resume must restore.
pub fn state_variables(ir: &Ir, weights: &[Tensor]) -> StateResult<Vec<Tensor>> {
    let mut vars: Vec<Tensor> = ir.main_graph().variables()?.into_iter().filter(|v| !weights.contains(v)).collect();
    vars.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(vars)
}

/// The current values of `vars`, by name.
pub fn read(session: &mut Session, vars: &[Tensor]) -> StateResult<Vec<(String, HostArray)>> {
    let data = session.get_tensors_data(vars.iter())?;
    Ok(vars.iter().map(|v| v.name().to_string()).zip(data).collect())
}

/// Save `weights`, `state` (from [`read`]) and `counters` to `path` (replacing
/// any previous checkpoint atomically).
pub fn save(
    path: &Path,
    weights: &[(String, HostArray)],
    state: &[(String, HostArray)],
    counters: &[(&str, u64)],
) -> StateResult<()> {
    let mut arrays: Vec<(String, HostArray)> = weights.iter().chain(state).cloned().collect();
    arrays.extend(counters.iter().map(|&(n, v)| (counter_name(n), HostArray::from(v))));
    popxl::checkpoint::save(path, &arrays)?;
    Ok(())
}

/// A checkpoint read by `--resume`.
pub struct Checkpoint {
    path: PathBuf,
    arrays: HashMap<String, HostArray>,
}

impl Checkpoint {
    /// Read the checkpoint at `path`.
    pub fn load(path: &Path) -> StateResult<Checkpoint> {
        let arrays = popxl::checkpoint::load(path)?.into_iter().collect();
        Ok(Checkpoint { path: path.to_path_buf(), arrays })
    }

    fn get(&self, name: &str) -> StateResult<&HostArray> {
        self.arrays.get(name).ok_or_else(|| {
            format!(
                "--resume {}: no array `{name}` (not a checkpoint of this program's training state)",
                self.path.display()
            )
            .into()
        })
    }

    /// The arrays `names`, in that order.
    pub fn arrays(&self, names: &[&str]) -> StateResult<Vec<(String, HostArray)>> {
        names.iter().map(|&n| Ok((n.to_string(), self.get(n)?.clone()))).collect()
    }

    /// Write the saved values of `vars` (weights or [`state_variables`]) into
    /// `session`'s variables of the same names.
    pub fn restore(&self, session: &mut Session, vars: &[Tensor]) -> StateResult<()> {
        let data: Vec<&HostArray> = vars.iter().map(|v| self.get(v.name())).collect::<StateResult<_>>()?;
        session.write_variables_data(vars.iter().zip(data))?;
        Ok(())
    }

    /// Counter `name`.
    pub fn counter(&self, name: &str) -> StateResult<u64> {
        let full = counter_name(name);
        match self.get(&full)? {
            HostArray::U64(a) if a.ndim() == 0 => Ok(a.iter().copied().next().unwrap_or_default()),
            other => Err(format!(
                "--resume {}: `{full}` is a {:?} array of shape {:?}, not a uint64 scalar",
                self.path.display(),
                other.dtype(),
                other.shape()
            )
            .into()),
        }
    }

    /// Check that setting `name` (saved as a counter) has the value the
    /// checkpoint was trained with.
    pub fn expect_setting(&self, name: &str, value: u64) -> StateResult<()> {
        let saved = self.counter(name)?;
        if saved != value {
            return Err(format!(
                "--resume {}: the checkpoint was trained with {name} {saved}, this run has {value}",
                self.path.display()
            )
            .into());
        }
        Ok(())
    }
}

/// Where an epoch-based training (shuffled order per epoch) is in its
/// schedule: what a checkpoint holds besides the variables, so that a resumed
/// run draws the same batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// Steps trained (those before a resume included).
    pub step: u64,
    /// The epoch of the next batch.
    pub epoch: u64,
    /// The index of the next batch in that epoch's order.
    pub batch: u64,
    /// The shuffle generator's state before it drew that epoch's order.
    pub epoch_rng: u64,
}

impl Position {
    /// The counters of a checkpoint: the position, and the settings that
    /// define the schedule (batch size and batches per epoch).
    pub fn counters(self, batch: usize, batches_per_epoch: usize) -> Vec<(&'static str, u64)> {
        vec![
            ("step", self.step),
            ("epoch", self.epoch),
            ("batch_in_epoch", self.batch),
            ("shuffle_rng", self.epoch_rng),
            ("batch", batch as u64),
            ("batches_per_epoch", batches_per_epoch as u64),
        ]
    }

    /// The position saved in `ck`.
    pub fn load(ck: &Checkpoint) -> StateResult<Position> {
        Ok(Position {
            step: ck.counter("step")?,
            epoch: ck.counter("epoch")?,
            batch: ck.counter("batch_in_epoch")?,
            epoch_rng: ck.counter("shuffle_rng")?,
        })
    }
}
