//! Named arrays in files (`popxl::checkpoint`): numpy-written fixtures read
//! back with the values numpy wrote (`tests/fixtures/checkpoint/make.py`),
//! round trips through every format, hostile files refused with typed errors,
//! and a writer killed mid-save leaving the previous checkpoint loadable.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use half::f16;
use ndarray::{arr1, arr2, ArrayD, IxDyn};
use popart_ir::float8::Float8_143;
use popart_ir::DataType;
use popxl::checkpoint::{self, CheckpointError, Format, Limits};
use popxl::HostArray;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoint").join(name)
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("popxl-ckpt-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `np.arange(6, dtype=np.float32).reshape(2, 3) / 4`.
fn a() -> HostArray {
    HostArray::from(arr2(&[[0.0f32, 0.25, 0.5], [0.75, 1.0, 1.25]]))
}

fn one(path: &Path) -> HostArray {
    let mut arrays = checkpoint::load(path).unwrap();
    assert_eq!(arrays.len(), 1, "{}", path.display());
    arrays.remove(0).1
}

#[test]
fn numpy_npy_files_read_with_numpys_values() {
    assert_eq!(one(&fixture("f32.npy")), a());
    assert_eq!(one(&fixture("be_i32.npy")), HostArray::from(arr1(&[1i32, -2, 70000])));
    assert_eq!(one(&fixture("bool.npy")), HostArray::from(arr2(&[[true, false], [false, true]])));
    let h = [0.5, -2.0, 65504.0].map(f16::from_f32);
    assert_eq!(one(&fixture("f16.npy")), HostArray::from(arr1(&h)));
    assert_eq!(one(&fixture("scalar_f64.npy")), HostArray::from(3.25f64));
    assert_eq!(one(&fixture("empty_i64.npy")), HostArray::from(ArrayD::<i64>::zeros(IxDyn(&[0, 3]))));
    assert_eq!(one(&fixture("u16.npy")), HostArray::from(arr1(&[1u16, 65535])));
    assert_eq!(one(&fixture("v2.npy")), HostArray::from(arr1(&[1.5f32, 2.5])));
    // A single .npy file's array is named by the file's stem.
    assert_eq!(checkpoint::load(&fixture("f32.npy")).unwrap()[0].0, "f32");
}

#[test]
fn numpy_archives_and_safetensors_read_in_file_order() {
    let savez = checkpoint::load(&fixture("savez.npz")).unwrap();
    let expected = vec![
        ("W0".to_string(), a()),
        ("b0".to_string(), HostArray::from(arr1(&[1i32, 2, 3]))),
        ("step".to_string(), HostArray::from(41i64)),
    ];
    assert_eq!(savez, expected);
    let compressed = checkpoint::load(&fixture("compressed.npz")).unwrap();
    assert_eq!(compressed, vec![("W0".to_string(), a()), ("mask".to_string(), HostArray::from(arr1(&[true, false])))]);
    let st = checkpoint::load(&fixture("hand.safetensors")).unwrap();
    let h = [1.0, 0.25].map(f16::from_f32);
    assert_eq!(
        st,
        vec![
            ("W0".to_string(), a()),
            ("ids".to_string(), HostArray::from(arr1(&[5i64, -7]))),
            ("h".to_string(), HostArray::from(arr1(&h))),
        ]
    );
    let picked = checkpoint::select(&fixture("savez.npz"), savez, &["step", "W0"]).unwrap();
    assert_eq!(picked[0].0, "step");
    assert_eq!(picked[1].1, a());
}

fn every_type() -> Vec<(String, HostArray)> {
    vec![
        ("bool".into(), HostArray::from(arr1(&[true, false, true]))),
        ("i8".into(), HostArray::from(arr1(&[-128i8, 127]))),
        ("i16".into(), HostArray::from(arr1(&[-30000i16, 7]))),
        ("i32".into(), HostArray::from(arr2(&[[1i32, -2], [3, i32::MIN]]))),
        ("i64".into(), HostArray::from(i64::MAX)),
        ("u8".into(), HostArray::from(arr1(&[0u8, 255]))),
        ("u16".into(), HostArray::from(arr1(&[65535u16]))),
        ("u32".into(), HostArray::from(arr1(&[u32::MAX, 0]))),
        ("u64".into(), HostArray::from(arr1(&[u64::MAX]))),
        ("f16".into(), HostArray::from(arr1(&[f16::from_f32(-0.5)]))),
        ("f32".into(), a()),
        ("f64".into(), HostArray::from(arr1(&[f64::MIN_POSITIVE, -1e300]))),
        ("empty".into(), HostArray::from(ArrayD::<f32>::zeros(IxDyn(&[3, 0, 2])))),
    ]
}

#[test]
fn every_format_round_trips_every_type() {
    let dir = scratch("roundtrip");
    for file in ["all.npz", "all.safetensors", "all_dir"] {
        let path = dir.join(file);
        checkpoint::save(&path, &every_type()).unwrap();
        let back = checkpoint::load(&path).unwrap();
        // safetensors orders by type and name and a directory by file name:
        // compare by name.
        let want = sorted(every_type());
        assert_eq!(sorted(back), want, "{file}");
        // Saving again replaces the previous file (no temporary left behind).
        checkpoint::save(&path, &want[..2]).unwrap();
        assert_eq!(checkpoint::load(&path).unwrap().len(), 2, "{file}");
    }
    let single = dir.join("one.npy");
    checkpoint::save(&single, &every_type()[3..4]).unwrap();
    assert_eq!(one(&single), every_type()[3].1);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_a_format_cannot_hold_is_a_typed_error() {
    let f8 = HostArray::F8_143(ArrayD::from_elem(IxDyn(&[2]), Float8_143(0x38)));
    for format in [Format::Npz, Format::Npy, Format::Safetensors] {
        let err = checkpoint::encode(format, &[("x".into(), f8.clone())]).unwrap_err();
        assert!(matches!(err, CheckpointError::Unrepresentable { dtype: DataType::Float8_143, .. }), "{err}");
    }
    let two = vec![("x".to_string(), a()), ("x".to_string(), a())];
    assert!(matches!(checkpoint::encode(Format::Npz, &two), Err(CheckpointError::Duplicate { .. })));
    for name in ["", ".", "..", "a/b", "..\\x", "nul\0"] {
        let err = checkpoint::encode(Format::Npz, &[(name.to_string(), a())]).unwrap_err();
        assert!(matches!(err, CheckpointError::BadName { .. }), "{name:?}: {err}");
    }
    let dir = scratch("badname");
    let err = checkpoint::save(&dir.join("w"), &[("../escape".to_string(), a())]).unwrap_err();
    assert!(matches!(err, CheckpointError::BadName { .. }), "{err}");
    assert!(!dir.join("escape.npy").exists());
    assert!(matches!(
        checkpoint::save(&dir.join("w.npy"), &every_type()),
        Err(CheckpointError::NotOneArray { count: 13, .. })
    ));
    let arrays = checkpoint::load(&fixture("savez.npz")).unwrap();
    let err = checkpoint::select(&fixture("savez.npz"), arrays, &["W9"]).unwrap_err();
    assert!(matches!(&err, CheckpointError::Missing { name, .. } if name == "W9"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `.npy` file of `header` (a dict literal) followed by `data`.
fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn hostile_npy_headers_are_refused_before_allocating() {
    let limits = Limits::default();
    let decode = |bytes: &[u8]| checkpoint::decode(Format::Npy, bytes, &limits);
    // A declared shape far larger than the data present.
    let lying = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", &[0; 8]);
    let err = decode(&lying).unwrap_err();
    assert!(matches!(&err, CheckpointError::DataSize { needed: Some(4_000_000_000_000), available: 8, .. }), "{err}");
    // A shape whose element count overflows.
    let overflow = npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", &[]);
    assert!(matches!(decode(&overflow), Err(CheckpointError::DataSize { needed: None, .. })));
    for (header, what) in [
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "negative dimension"),
        ("{'descr': '<f4', 'fortran_order': False}", "no shape"),
        ("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (), }", "repeated key"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", "unknown key"),
        ("['descr']", "not a dict"),
    ] {
        let err = decode(&npy(header, &[0; 4])).unwrap_err();
        assert!(matches!(err, CheckpointError::NotNpy { .. }), "{what}: {err}");
    }
    let err = decode(&npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", &[0; 8])).unwrap_err();
    assert!(matches!(&err, CheckpointError::UnsupportedType { dtype, .. } if dtype == "<c8"), "{err}");
    let err = decode(&npy("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", &[1, 7])).unwrap_err();
    assert!(matches!(err, CheckpointError::Malformed { .. }), "{err}");
    // A header length past the end, a truncated magic, another version.
    let mut long = npy("{}", &[]);
    long[8] = 0xff;
    assert!(matches!(decode(&long), Err(CheckpointError::NotNpy { .. })));
    assert!(matches!(decode(b"\x93NUM"), Err(CheckpointError::NotNpy { .. })));
    let mut v9 = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &[0; 4]);
    v9[6] = 9;
    assert!(matches!(decode(&v9), Err(CheckpointError::NotNpy { .. })));
    let err = checkpoint::load(&fixture("fortran.npy")).unwrap_err();
    assert!(err.to_string().contains("Fortran"), "{err}");
}

#[test]
fn hostile_archives_are_refused_with_typed_errors() {
    // 64 MiB of zeros deflated to 64 KiB: refused at the limit, read under a larger one.
    let small = Limits { max_bytes: 1 << 20, ..Limits::default() };
    let err = checkpoint::load_with(&fixture("bomb.npz"), &small).unwrap_err();
    assert!(matches!(err, CheckpointError::TooLarge { limit: 1048576, .. }), "{err}");
    let zeros = checkpoint::load(&fixture("bomb.npz")).unwrap();
    assert_eq!(zeros[0].1.shape(), &[1 << 24]);
    // A member name climbing out of a directory.
    let err = checkpoint::load(&fixture("path_member.npz")).unwrap_err();
    assert!(matches!(&err, CheckpointError::BadName { name, .. } if name == "../evil"), "{err}");
    // Not an archive at all, and a truncated one.
    let npz = std::fs::read(fixture("savez.npz")).unwrap();
    for bytes in [&b"PK\x03\x04 not really"[..], &npz[..npz.len() / 2]] {
        let err = checkpoint::decode(Format::Npz, bytes, &Limits::default()).unwrap_err();
        assert!(matches!(err, CheckpointError::NotArchive { .. }), "{err}");
    }
    // A file larger than the limit is not read at all.
    let tiny = Limits { max_bytes: 100, ..Limits::default() };
    assert!(matches!(checkpoint::load_with(&fixture("savez.npz"), &tiny), Err(CheckpointError::TooLarge { .. })));
    // safetensors: a data range past the end of the file, and a header length past it.
    let st = std::fs::read(fixture("hand.safetensors")).unwrap();
    let err = checkpoint::decode(Format::Safetensors, &st[..st.len() - 4], &Limits::default()).unwrap_err();
    assert!(matches!(err, CheckpointError::NotArchive { .. }), "{err}");
    let mut huge = st.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        checkpoint::decode(Format::Safetensors, &huge, &Limits::default()),
        Err(CheckpointError::NotArchive { .. })
    ));
}

fn sorted(mut arrays: Vec<(String, HostArray)>) -> Vec<(String, HostArray)> {
    arrays.sort_by(|x, y| x.0.cmp(&y.0));
    arrays
}

/// Environment variable naming the file the child writer saves to.
const CHILD: &str = "POPXL_CHECKPOINT_CRASH_CHILD";

/// 64 MiB of arrays: long enough to write that the parent can kill the
/// writer in the middle.
fn big() -> Vec<(String, HostArray)> {
    (0..4).map(|i| (format!("w{i}"), HostArray::from(ArrayD::from_elem(IxDyn(&[1 << 22]), i as f32)))).collect()
}

/// Run by [`a_writer_killed_mid_save_leaves_the_previous_checkpoint`] in a
/// child process: saves [`big`] once, then waits to be killed.
#[test]
#[ignore = "the child process of a_writer_killed_mid_save_leaves_the_previous_checkpoint"]
fn crash_writer_child() {
    let Some(path) = std::env::var_os(CHILD) else { return };
    checkpoint::save(Path::new(&path), &big()).unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_writer_killed_mid_save_leaves_the_previous_checkpoint() {
    let dir = scratch("crash");
    for file in ["w.npz", "w.safetensors", "w_dir"] {
        let path = dir.join(file);
        let previous = vec![("w0".to_string(), a()), ("step".to_string(), HostArray::from(3i64))];
        checkpoint::save(&path, &previous).unwrap();
        let mut killed_mid_write = false;
        for _attempt in 0..10 {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args(["checkpoint::crash_writer_child", "--exact", "--ignored", "--test-threads=1"])
                .env(CHILD, &path)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let prefix = format!(".{file}.tmp-{}-", child.id());
            let start = Instant::now();
            let temp_exists = || {
                std::fs::read_dir(&dir).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with(&prefix))
            };
            while !temp_exists() && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_micros(200));
            }
            child.kill().unwrap();
            child.wait().unwrap();
            // Killed while its temporary file existed: the save had not been
            // renamed over `path`, which must still hold the previous arrays.
            if temp_exists() && sorted(checkpoint::load(&path).unwrap()) == sorted(previous.clone()) {
                killed_mid_write = true;
                break;
            }
            // The save finished first: start again from the previous arrays.
            checkpoint::save(&path, &previous).unwrap();
        }
        assert!(killed_mid_write, "{file}: the writer was never killed mid-save");
        // The leftover temporary file does not disturb the next save or load.
        checkpoint::save(&path, &big()[..1]).unwrap();
        assert_eq!(checkpoint::load(&path).unwrap(), big()[..1].to_vec(), "{file}");
        assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains(".old-")));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
