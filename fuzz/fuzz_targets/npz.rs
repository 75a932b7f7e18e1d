//! Any bytes as a `.npz` file: the reader never panics and never allocates
//! beyond the input and a 64 MiB cap on what it inflates; what it reads
//! writes back and reads again to the same arrays.

#![no_main]

use libfuzzer_sys::fuzz_target;
use popxl::checkpoint::{self, Format, Limits};

const FORMAT: Format = Format::Npz;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_bytes: 64 << 20, max_arrays: 4096 };
    let Ok(arrays) = checkpoint::decode(FORMAT, data, &limits) else { return };
    let bytes = checkpoint::encode(FORMAT, &arrays).expect("what was read can be written");
    let mut again = checkpoint::decode(FORMAT, &bytes, &limits).expect("what was written can be read");
    let mut arrays = arrays;
    // safetensors orders by type and name: compare by name; compare the bytes
    // (NaN payloads included), not the values.
    arrays.sort_by(|x, y| x.0.cmp(&y.0));
    again.sort_by(|x, y| x.0.cmp(&y.0));
    let bytes = |v: &[(String, popxl::HostArray)]| -> Vec<_> {
        v.iter().map(|(n, a)| (n.clone(), a.to_host_tensor().info, a.to_host_tensor().bytes)).collect()
    };
    assert_eq!(bytes(&arrays), bytes(&again));
});
