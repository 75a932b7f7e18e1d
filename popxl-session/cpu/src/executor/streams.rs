//! Host streams of the executor: binding host memory to the streams the
//! transfer instructions read and write.

use popart_lower::StreamId;

use super::{BindError, CpuExecutor, StreamSlot};

impl CpuExecutor {
    /// Bind stream `stream` to `count` elements of host memory at `host`
    /// (`bytes` long) for the next executions; resets its cursor.
    ///
    /// # Safety
    /// `host` must be valid for reads (host-to-device) or writes (device-to-host)
    /// of `bytes` bytes until the stream is unbound or rebound, and must not be
    /// accessed by anything else while a program runs.
    pub unsafe fn bind_stream(
        &mut self,
        stream: StreamId,
        host: *mut u8,
        bytes: usize,
        count: usize,
    ) -> Result<(), BindError> {
        // SAFETY: `host` holds `count` elements of `bytes` (this function's contract),
        // which is the strided contract with stride 1 from element 0.
        unsafe { self.bind_stream_strided(stream, host, bytes, count, 1, 0) }
    }

    /// [`CpuExecutor::bind_stream`] to every `stride`-th element from element
    /// `first`: transfer `k` uses element `(k % count) * stride + first` (how a
    /// replica reads its slice of a `[num_host_transfers, replication_factor,
    /// ...]` host array: `stride` = replication factor, `first` = replica).
    ///
    /// # Safety
    /// As [`CpuExecutor::bind_stream`]; elements of other replicas in between
    /// may be accessed by other executors at the same time (never written by
    /// this one).
    pub unsafe fn bind_stream_strided(
        &mut self,
        stream: StreamId,
        host: *mut u8,
        bytes: usize,
        count: usize,
        stride: usize,
        first: usize,
    ) -> Result<(), BindError> {
        let element_bytes = *self.stream_bytes.get(stream.index()).ok_or(BindError::UnknownStream(stream.0))?;
        // This check establishes the invariant the transfers' `unsafe` relies on:
        // every element `(k % count) * stride + first` lies within the `bytes` bound here.
        let last = count.checked_sub(1).and_then(|c| c.checked_mul(stride)).and_then(|e| e.checked_add(first));
        let need = last.and_then(|e| e.checked_add(1)).and_then(|n| n.checked_mul(element_bytes));
        if stride == 0 || need.is_none_or(|need| bytes < need) {
            return Err(BindError::TooSmall { stream: stream.0, got: bytes, count, element_bytes });
        }
        self.streams[stream.index()] = StreamSlot { host, element_bytes, count, cursor: 0, stride, first };
        Ok(())
    }

    /// Forget every stream binding.
    pub fn unbind_streams(&mut self) {
        self.streams.fill(StreamSlot::UNBOUND);
    }

    /// Number of transfers made on `stream` since it was bound.
    pub fn stream_cursor(&self, stream: StreamId) -> usize {
        self.streams.get(stream.index()).map_or(0, |s| s.cursor)
    }
}
