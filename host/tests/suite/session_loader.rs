//! Sharded loading of safetensors files into a session — conformance scenarios 23 (split
//! on a dimension), 24 (no rule: replicated) and 25 (presharded files, one per worker) in
//! threads and in child processes — and the loader's refusals: each is a typed error
//! naming the file and the tensor, and leaves the session usable.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use safetensors::tensor::TensorView;
use safetensors::Dtype;
use tessera_core::dtype::DataType;
use tessera_host::input::InputError;
use tessera_host::runtime::Placement;
use tessera_host::session::collective::Scope;
use tessera_host::session::loader::{LoadError, ShardRule, ShardRules};
use tessera_host::session::{HostArray, HostValue, Register, Session, SessionError};

/// Device memory per worker.
const MEMORY: usize = 4 << 20;

fn process() -> Placement {
    Placement::Process(PathBuf::from(env!("CARGO_BIN_EXE_tessera")))
}

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("tessera-loader-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tensor to save: name, type, shape, little-endian bytes.
type Tensor = (&'static str, Dtype, Vec<usize>, Vec<u8>);

/// Saves `tensors` as a safetensors file, written by the safetensors crate itself.
fn save(path: &Path, tensors: &[Tensor]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            (
                *name,
                TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `n` distinct values from `from`.
fn iota(from: usize, n: usize) -> Vec<f32> {
    (from..from + n).map(|i| i as f32).collect()
}

/// `x[rows, cols]` of a row-major matrix with `width` columns, row-major.
fn block(x: &[f32], width: usize, rows: Range<usize>, cols: Range<usize>) -> Vec<f32> {
    rows.flat_map(|r| x[r * width..][cols.clone()].to_vec())
        .collect()
}

fn array(session: &Session, register: &Register, worker: usize) -> HostArray {
    match session.debug_get(register, worker).unwrap() {
        HostValue::Array(array) => array,
        other => panic!(
            "worker {worker}: register {} holds {other:?}",
            register.id()
        ),
    }
}

/// Asserts worker `worker`'s register is an f32 array of `shape` holding `values`.
fn assert_f32(
    session: &Session,
    register: &Register,
    worker: usize,
    shape: &[u32],
    values: &[f32],
) {
    let array = array(session, register, worker);
    assert_eq!(array.shape(), shape, "worker {worker}: shape");
    assert_eq!(array.to_f32().unwrap(), values, "worker {worker}: values");
}

/// x (64, 128) and y (32, 128), f32, with values that tell every element apart.
fn xy() -> (Vec<f32>, Vec<f32>) {
    (iota(0, 64 * 128), iota(100_000, 32 * 128))
}

fn save_xy(path: &Path) -> (Vec<f32>, Vec<f32>) {
    let (x, y) = xy();
    save(
        path,
        &[
            ("x", Dtype::F32, vec![64, 128], f32_bytes(&x)),
            ("y", Dtype::F32, vec![32, 128], f32_bytes(&y)),
        ],
    );
    (x, y)
}

fn split_xy() -> ShardRules {
    ShardRules::new().split("x", 1).split("y", 0)
}

/// Scenario 23: x split on dim 1 gives w0 = x[:, :64], w1 = x[:, 64:]; y split on dim 0
/// gives y[0:16] and y[16:32].
fn split_on_a_dimension(placement: Placement) {
    let dir = TempDir::new("split");
    let path = dir.file("model.safetensors");
    let (x, y) = save_xy(&path);
    let session = Session::new(&placement, 2, 1, MEMORY).unwrap();
    let loaded = session.load_safetensors(&path, &split_xy()).unwrap();
    assert_eq!(loaded.len(), 2);
    assert_f32(
        &session,
        &loaded["x"],
        0,
        &[64, 64],
        &block(&x, 128, 0..64, 0..64),
    );
    assert_f32(
        &session,
        &loaded["x"],
        1,
        &[64, 64],
        &block(&x, 128, 0..64, 64..128),
    );
    assert_f32(&session, &loaded["y"], 0, &[16, 128], &y[..16 * 128]);
    assert_f32(&session, &loaded["y"], 1, &[16, 128], &y[16 * 128..]);
}

/// Every type the loader takes: (safetensors type, tessera type, element size).
const TYPES: [(&str, Dtype, DataType, usize); 15] = [
    ("f16", Dtype::F16, DataType::F16, 2),
    ("bf16", Dtype::BF16, DataType::BF16, 2),
    ("f32", Dtype::F32, DataType::F32, 4),
    ("f64", Dtype::F64, DataType::F64, 8),
    ("i8", Dtype::I8, DataType::I8, 1),
    ("i16", Dtype::I16, DataType::I16, 2),
    ("i32", Dtype::I32, DataType::I32, 4),
    ("i64", Dtype::I64, DataType::I64, 8),
    ("u8", Dtype::U8, DataType::U8, 1),
    ("u16", Dtype::U16, DataType::U16, 2),
    ("u32", Dtype::U32, DataType::U32, 4),
    ("u64", Dtype::U64, DataType::U64, 8),
    ("bool", Dtype::BOOL, DataType::Bool, 1),
    ("f8_e4m3", Dtype::F8_E4M3, DataType::F8E4M3, 1),
    ("f8_e5m2", Dtype::F8_E5M2, DataType::F8E5M2, 1),
];

/// Scenario 24: without a rule, every worker holds the whole tensor — of every type.
fn replicated_without_a_rule(placement: Placement) {
    let dir = TempDir::new("replicate");
    let path = dir.file("model.safetensors");
    let shape = vec![2, 3, 5];
    let tensors: Vec<Tensor> = TYPES
        .iter()
        .enumerate()
        .map(|(t, &(name, dtype, _, size))| {
            // Bytes that differ per tensor and per position; bools are 0 or 1.
            let bytes = (0..30 * size)
                .map(|i| {
                    if dtype == Dtype::BOOL {
                        (i % 2) as u8
                    } else {
                        (i * 7 + t) as u8
                    }
                })
                .collect();
            (name, dtype, shape.clone(), bytes)
        })
        .collect();
    save(&path, &tensors);
    let session = Session::new(&placement, 2, 1, MEMORY).unwrap();
    let loaded = session.load_safetensors(&path, &ShardRules::new()).unwrap();
    assert_eq!(loaded.len(), TYPES.len());
    for ((name, _, _, bytes), &(_, _, dtype, _)) in tensors.iter().zip(&TYPES) {
        for worker in 0..2 {
            let array = array(&session, &loaded[*name], worker);
            assert_eq!(array.dtype(), dtype, "{name} on worker {worker}");
            assert_eq!(array.shape(), [2, 3, 5], "{name} on worker {worker}");
            assert_eq!(array.bytes(), bytes, "{name} on worker {worker}");
        }
    }
}

/// Scenario 25: one file per worker holding its part, loaded with no communication,
/// gives the same registers as the split of scenario 23.
fn presharded_files(placement: Placement) {
    let dir = TempDir::new("presharded");
    let (x, y) = save_xy(&dir.file("whole.safetensors"));
    let parts: Vec<PathBuf> = (0..2)
        .map(|rank| {
            let path = dir.file(&format!("part-{rank}.safetensors"));
            let cols = rank * 64..rank * 64 + 64;
            let rows = rank * 16 * 128..(rank + 1) * 16 * 128;
            save(
                &path,
                &[
                    (
                        "x",
                        Dtype::F32,
                        vec![64, 64],
                        f32_bytes(&block(&x, 128, 0..64, cols)),
                    ),
                    ("y", Dtype::F32, vec![16, 128], f32_bytes(&y[rows])),
                ],
            );
            path
        })
        .collect();
    let session = Session::new(&placement, 2, 1, MEMORY).unwrap();
    let presharded = session.load_presharded(&parts).unwrap();
    let split = session
        .load_safetensors(dir.file("whole.safetensors"), &split_xy())
        .unwrap();
    assert_eq!(presharded.len(), 2);
    for name in ["x", "y"] {
        for worker in 0..2 {
            assert_eq!(
                array(&session, &presharded[name], worker),
                array(&session, &split[name], worker),
                "{name} on worker {worker}"
            );
        }
    }
    assert_f32(
        &session,
        &presharded["x"],
        1,
        &[64, 64],
        &block(&x, 128, 0..64, 64..128),
    );
}

#[test]
fn scenario_23_split_in_threads() {
    split_on_a_dimension(Placement::Thread);
}

#[test]
fn scenario_23_split_in_child_processes() {
    split_on_a_dimension(process());
}

#[test]
fn scenario_24_replicated_in_threads() {
    replicated_without_a_rule(Placement::Thread);
}

#[test]
fn scenario_24_replicated_in_child_processes() {
    replicated_without_a_rule(process());
}

#[test]
fn scenario_25_presharded_in_threads() {
    presharded_files(Placement::Thread);
}

#[test]
fn scenario_25_presharded_in_child_processes() {
    presharded_files(process());
}

/// A refused load must allocate nothing: a fresh session's next register is id 1 (a load
/// that allocated and freed would hand back a higher id first).
fn assert_nothing_allocated(session: &Session) {
    let next = session.empty(DataType::F32, &[1]).unwrap();
    assert_eq!(next.id(), 1, "a refused load allocated a register");
}

#[test]
fn a_split_that_does_not_divide_names_the_tensor() {
    let dir = TempDir::new("indivisible");
    let path = dir.file("odd.safetensors");
    save(
        &path,
        &[
            ("even", Dtype::F32, vec![32, 4], f32_bytes(&iota(0, 128))),
            ("odd", Dtype::F32, vec![33, 4], f32_bytes(&iota(0, 132))),
        ],
    );
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    let rules = ShardRules::new().with_default(ShardRule::Split { dim: 0 });
    let error = session.load_safetensors(&path, &rules).unwrap_err();
    match &error {
        LoadError::Indivisible {
            file,
            tensor,
            shape,
            rule,
            workers,
        } => {
            assert_eq!(file, &path);
            assert_eq!(tensor, "odd");
            assert_eq!(shape, &[33, 4]);
            assert_eq!(*rule, ShardRule::Split { dim: 0 });
            assert_eq!(*workers, 2);
        }
        other => panic!("expected an indivisible split, got {other:?}"),
    }
    let message = error.to_string();
    for part in [
        "odd.safetensors",
        "\"odd\"",
        "[33, 4]",
        "dimension 0",
        "2 workers",
    ] {
        assert!(message.contains(part), "{message:?} does not name {part}");
    }
    assert_nothing_allocated(&session);
}

#[test]
fn a_split_on_a_missing_dimension_or_tensor_is_refused() {
    let dir = TempDir::new("nodim");
    let path = dir.file("m.safetensors");
    save(
        &path,
        &[("w", Dtype::F32, vec![4, 4], f32_bytes(&iota(0, 16)))],
    );
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    match session.load_safetensors(&path, &ShardRules::new().split("w", 2)) {
        Err(LoadError::NoDim { tensor, shape, .. }) => {
            assert_eq!((tensor.as_str(), shape.as_slice()), ("w", &[4, 4][..]))
        }
        other => panic!("expected a missing dimension, got {other:?}"),
    }
    // A rule for a tensor the file lacks is a typo, not something to ignore.
    match session.load_safetensors(&path, &ShardRules::new().split("v", 0)) {
        Err(LoadError::UnknownTensor { tensor, .. }) => assert_eq!(tensor, "v"),
        other => panic!("expected an unknown tensor, got {other:?}"),
    }
    assert_nothing_allocated(&session);
}

#[test]
fn a_truncated_corrupt_or_missing_file_is_an_error_not_a_panic() {
    let dir = TempDir::new("corrupt");
    let good = dir.file("good.safetensors");
    save(
        &good,
        &[("w", Dtype::F32, vec![8, 8], f32_bytes(&iota(0, 64)))],
    );
    let bytes = std::fs::read(&good).unwrap();
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    let cases: [(&str, Vec<u8>); 5] = [
        ("truncated-data", bytes[..bytes.len() - 10].to_vec()),
        ("truncated-header", bytes[..20].to_vec()),
        ("empty", Vec::new()),
        (
            "huge-header-length",
            [u64::MAX.to_le_bytes().as_slice(), &bytes[8..]].concat(),
        ),
        (
            "garbage-header",
            [&bytes[..8], &[b'!'; 4][..], &bytes[12..]].concat(),
        ),
    ];
    for (name, data) in cases {
        let path = dir.file(&format!("{name}.safetensors"));
        std::fs::write(&path, data).unwrap();
        match session.load_safetensors(&path, &ShardRules::new()) {
            // A size the header claims past the file's end, or a malformed header.
            Err(error @ (LoadError::Claim { .. } | LoadError::Format { .. })) => {
                assert!(error.to_string().contains(&format!("{name}.safetensors")));
            }
            other => panic!("{name}: expected a claim or a format error, got {other:?}"),
        }
    }
    match session.load_safetensors(dir.file("absent.safetensors"), &ShardRules::new()) {
        Err(LoadError::Input(InputError::Io { path, .. })) => {
            assert!(path.ends_with("absent.safetensors"))
        }
        other => panic!("expected a read error, got {other:?}"),
    }
    assert_nothing_allocated(&session);
    // The session is still usable: the good file loads.
    let loaded = session.load_safetensors(&good, &ShardRules::new()).unwrap();
    assert_f32(&session, &loaded["w"], 1, &[8, 8], &iota(0, 64));
}

/// The loader read any path whole (`std::fs::read`): a FIFO blocked it for ever,
/// `/dev/zero` grew the process until the OOM killer ended it, and a sparse file was read
/// at its full size. Now it opens files under the input rules (regular files only) and
/// reads by ranges after the workers have room: each case is refused within seconds,
/// naming the path, and the session stays usable.
#[test]
fn the_loader_reads_only_regular_files_and_never_more_than_the_workers_hold() {
    let dir = TempDir::new("hostile");
    let fifo = dir.file("fifo.safetensors");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A header claiming one f32 tensor of 2^15 × 2^23 elements (1 TiB), over a sparse file of
    // exactly that size: the header agrees with the file, the data are holes.
    let sparse = dir.file("sparse.safetensors");
    let header =
        br#"{"w":{"dtype":"F32","shape":[32768,8388608],"data_offsets":[0,1099511627776]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    std::fs::write(&sparse, &bytes).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)
        .unwrap();
    file.set_len(bytes.len() as u64 + (1 << 40)).unwrap();
    drop(file);
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    let paths = [
        (fifo.clone(), "a FIFO"),
        (PathBuf::from("/dev/zero"), "a character device"),
        (dir.0.clone(), "a directory"),
    ];
    // Each load runs on a thread of its own, so a loader that blocks fails the test
    // instead of hanging it.
    let load = |path: PathBuf| {
        let (tx, rx) = std::sync::mpsc::channel();
        let session = &session;
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let _ = tx.send(session.load_safetensors(&path, &ShardRules::new()));
            });
            rx.recv_timeout(std::time::Duration::from_secs(20))
                .expect("the load returned within 20 s")
        })
    };
    for (path, kind) in paths {
        match load(path.clone()) {
            Err(error @ LoadError::Input(InputError::NotRegular { .. })) => {
                let text = error.to_string();
                assert!(
                    text.contains(kind) && text.contains(&*path.to_string_lossy()),
                    "{text}"
                );
            }
            other => panic!(
                "{}: expected a refusal as {kind}, got {other:?}",
                path.display()
            ),
        }
    }
    // The sparse file: refused by the workers (no room for 1 TiB) before the host reads it.
    match load(sparse) {
        Err(LoadError::Worker { tensor, .. }) => assert_eq!(tensor, "w"),
        other => panic!("expected the workers to refuse the 1 TiB tensor, got {other:?}"),
    }
    assert_nothing_allocated(&session);
    let good = dir.file("good.safetensors");
    save(&good, &[("w", Dtype::F32, vec![4], f32_bytes(&iota(0, 4)))]);
    let loaded = session.load_safetensors(&good, &ShardRules::new()).unwrap();
    assert_f32(&session, &loaded["w"], 1, &[4], &iota(0, 4));
}

#[test]
fn an_unsupported_dtype_is_an_error_naming_it() {
    let dir = TempDir::new("dtype");
    let path = dir.file("complex.safetensors");
    save(
        &path,
        &[
            ("a", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0])),
            ("z", Dtype::C64, vec![2], vec![0; 16]),
        ],
    );
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    let error = session
        .load_safetensors(&path, &ShardRules::new())
        .unwrap_err();
    match &error {
        LoadError::Dtype { tensor, dtype, .. } => {
            assert_eq!((tensor.as_str(), *dtype), ("z", Dtype::C64))
        }
        other => panic!("expected an unsupported type, got {other:?}"),
    }
    assert!(error.to_string().contains("C64"), "{error}");
    assert_nothing_allocated(&session);
}

#[test]
fn a_worker_that_runs_out_of_memory_names_the_tensor_and_frees_the_load() {
    let dir = TempDir::new("oom");
    let path = dir.file("big.safetensors");
    let small = iota(0, 16);
    save(
        &path,
        &[
            ("a_small", Dtype::F32, vec![16], f32_bytes(&small)),
            ("b_big", Dtype::F32, vec![64, 1024], vec![0; 64 * 1024 * 4]),
        ],
    );
    let session = Session::new(&Placement::Thread, 2, 1, 64 << 10).unwrap();
    match session.load_safetensors(&path, &ShardRules::new()) {
        // Both workers run out: every failure is reported, worker 0's first.
        Err(LoadError::Worker { tensor, source, .. })
            if matches!(source.worker_failures()[..], [(0, ..), (1, ..)]) =>
        {
            assert_eq!(tensor, "b_big")
        }
        other => panic!("expected worker 0 to run out of memory on b_big, got {other:?}"),
    }
    // The session is still usable: a file that fits loads.
    let fits = dir.file("fits.safetensors");
    save(
        &fits,
        &[("a_small", Dtype::F32, vec![16], f32_bytes(&small))],
    );
    let loaded = session
        .load_safetensors(&fits, &ShardRules::new().split("a_small", 0))
        .unwrap();
    assert_f32(&session, &loaded["a_small"], 1, &[8], &small[8..]);
}

#[test]
fn in_group_splits_give_each_group_the_whole_tensor() {
    let dir = TempDir::new("groups");
    let path = dir.file("g.safetensors");
    let w = iota(0, 2 * 8);
    save(&path, &[("w", Dtype::F32, vec![2, 8], f32_bytes(&w))]);
    let session = Session::new(&Placement::Thread, 4, 2, MEMORY).unwrap();
    let rules = ShardRules::new().split("w", 1);
    let global = session.load_safetensors(&path, &rules).unwrap();
    let grouped = session
        .load_safetensors(&path, &rules.clone().with_scope(Scope::InGroup))
        .unwrap();
    for worker in 0..4 {
        let cols = worker * 2..worker * 2 + 2;
        assert_f32(
            &session,
            &global["w"],
            worker,
            &[2, 2],
            &block(&w, 8, 0..2, cols),
        );
        let cols = worker % 2 * 4..worker % 2 * 4 + 4;
        assert_f32(
            &session,
            &grouped["w"],
            worker,
            &[2, 4],
            &block(&w, 8, 0..2, cols),
        );
    }
    // Three columns of eight split across a group of two: refused, naming the group size.
    let odd = dir.file("odd.safetensors");
    save(
        &odd,
        &[("w", Dtype::F32, vec![2, 3], f32_bytes(&iota(0, 6)))],
    );
    match session.load_safetensors(&odd, &rules.with_scope(Scope::InGroup)) {
        Err(LoadError::Indivisible { workers: 2, .. }) => {}
        other => panic!("expected an indivisible split across a group, got {other:?}"),
    }
}

#[test]
fn presharded_files_that_disagree_are_refused() {
    let dir = TempDir::new("disagree");
    let file = |name: &str, tensors: &[Tensor]| {
        let path = dir.file(name);
        save(&path, tensors);
        path
    };
    let a = || ("a", Dtype::F32, vec![4], f32_bytes(&iota(0, 4)));
    let first = file(
        "0.safetensors",
        &[a(), ("b", Dtype::F32, vec![2], f32_bytes(&[0.0; 2]))],
    );
    let lacks_b = file("1-lacks-b.safetensors", &[a()]);
    let extra = file(
        "1-extra.safetensors",
        &[
            a(),
            ("b", Dtype::F32, vec![2], f32_bytes(&[0.0; 2])),
            ("c", Dtype::U8, vec![1], vec![1]),
        ],
    );
    let other_shape = file(
        "1-shape.safetensors",
        &[a(), ("b", Dtype::F32, vec![1, 2], f32_bytes(&[0.0; 2]))],
    );
    let other_type = file(
        "1-type.safetensors",
        &[a(), ("b", Dtype::I32, vec![2], vec![0; 8])],
    );
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    match session.load_presharded(std::slice::from_ref(&first)) {
        Err(LoadError::FileCount {
            files: 1,
            workers: 2,
        }) => {}
        other => panic!("expected a file count error, got {other:?}"),
    }
    match session.load_presharded(&[first.clone(), lacks_b.clone()]) {
        Err(LoadError::ShardMissing {
            file,
            worker: 1,
            tensor,
            ..
        }) => {
            assert_eq!((file, tensor.as_str()), (lacks_b, "b"))
        }
        other => panic!("expected a missing shard, got {other:?}"),
    }
    match session.load_presharded(&[first.clone(), extra]) {
        Err(LoadError::ShardMissing {
            worker: 0, tensor, ..
        }) => assert_eq!(tensor, "c"),
        other => panic!("expected a shard worker 0 lacks, got {other:?}"),
    }
    match session.load_presharded(&[first.clone(), other_shape]) {
        Err(LoadError::ShardMismatch {
            found, expected, ..
        }) => {
            assert_eq!(found, (DataType::F32, vec![1, 2]));
            assert_eq!(expected, (DataType::F32, vec![2]));
        }
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
    match session.load_presharded(&[first, other_type]) {
        Err(error @ LoadError::ShardMismatch { .. }) => {
            assert!(error.to_string().contains("int32"), "{error}")
        }
        other => panic!("expected a type mismatch, got {other:?}"),
    }
    assert_nothing_allocated(&session);
}

#[test]
fn copy_to_workers_gives_each_worker_its_own_array() {
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    let arrays = [
        HostArray::from_f32(&[2], &[1.0, 2.0]).unwrap(),
        HostArray::from_i32(&[3], &[3, 4, 5]).unwrap(),
    ];
    let register = session.copy_to_workers(&arrays).unwrap();
    session.sync_all().unwrap();
    assert_eq!(array(&session, &register, 0), arrays[0]);
    assert_eq!(array(&session, &register, 1), arrays[1]);
    match session.copy_to_workers(&arrays[..1]) {
        Err(SessionError::Count {
            expected: 2,
            actual: 1,
            ..
        }) => {}
        other => panic!("one array for two workers must be refused, got {other:?}"),
    }
}

#[test]
fn loading_after_shutdown_is_a_session_error() {
    let dir = TempDir::new("shutdown");
    let path = dir.file("m.safetensors");
    save(&path, &[("w", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0]))]);
    let session = Session::new(&Placement::Thread, 2, 1, MEMORY).unwrap();
    session.shutdown();
    match session.load_safetensors(&path, &ShardRules::new()) {
        Err(LoadError::Session {
            source: SessionError::ShutDown,
            ..
        }) => {}
        other => panic!("expected the session's shutdown, got {other:?}"),
    }
    match session.load_presharded(&[&path, &path]) {
        Err(LoadError::Session {
            source: SessionError::ShutDown,
            ..
        }) => {}
        other => panic!("expected the session's shutdown, got {other:?}"),
    }
}
