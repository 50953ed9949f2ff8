"""Type stubs of tessera's extension module (the classes `tessera` re-exports)."""

from os import PathLike
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
MAX_REGISTERS: int
HAS_MPI: bool
"""True when built with MPI (the cargo feature `mpi`): under `mpirun`, a session spans the
ranks and a runtime is one instance of the job. Without it, both refuse under `mpirun`."""

Placement = Literal["thread", "process", "qemu", "serial"]
ReduceOp = Literal["sum", "prod", "min", "max", "avg"]
ReduceOrder = Literal["workers", "ranks_first"]
Shape = Sequence[int]
Path = Union[str, PathLike[str]]
Value = Union[int, float, str, Tuple[int, ...], npt.NDArray[Any]]
Grouping = Union[
    Literal["all", "none"],
    Tuple[Literal["consecutive", "orthogonal"], int],
    Tuple[Literal["strided"], int, int],
]
Sharding = Union[
    Literal["none", "balanced", "padded_tail"],
    Tuple[Literal["explicit"], int, Sequence[Tuple[int, int]]],
]
ReturnType = Union[Literal["all", "final", "sum"], Tuple[Literal["every"], int]]

class TesseraError(Exception):
    """A failure of tessera: the message is the Rust error's; `kind` names its variant."""

    kind: str

class SessionError(TesseraError):
    """A session command failed; `workers` lists the worker of each failure."""

    workers: list[int]

class RuntimeError(TesseraError):
    """The device runtime refused or failed (preparing, weights, a step, seeds, RNG)."""

class CheckpointError(TesseraError):
    """A checkpoint could not be saved, read, or restored into this runtime."""

class ExecutableError(TesseraError):
    """A saved executable could not be written or read."""

class TraceError(TesseraError):
    """A trace could not start (one at a time per process) or its file be written."""

class ProgramError(TesseraError):
    """A program breaks one of core's rules (capacity, shapes, groupings, streams)."""

class Register:
    """A register on every worker; freed on the workers when collected or freed."""

    @property
    def id(self) -> int: ...
    @property
    def alive(self) -> bool: ...
    def free(self) -> None:
        """Frees the register on every worker now; using it afterwards raises."""

class Function:
    """A function every worker has, by name."""

    @property
    def name(self) -> str: ...

class Session:
    """A controller and its workers (TVM Disco's session), on threads, child processes,
    QEMU or boards on serial ports (`ports`, one per worker). Every method releases the
    GIL while the workers work. Arrays are read and written in place and must be
    C-contiguous (else ValueError); registers are freed on the workers when collected.

    Under `mpirun -np N python script.py` (the package installed with MPI) the session
    spans the ranks: on rank 0 the constructor returns the controller of `workers` workers
    spread over the ranks (`workers / N` each; global ids, groups and results as on one
    host); on every other rank it serves that rank's share until rank 0's session ends,
    then raises `SystemExit(0)`, so the rest of the script runs on rank 0 alone. One such
    session per job (MPI ends with it); a rank that dies ends the job."""

    def __init__(
        self,
        placement: Placement = "thread",
        workers: int = 4,
        groups: int = 1,
        memory: int = 16 << 20,
        *,
        exe: Optional[Path] = None,
        firmware: Optional[Path] = None,
        ports: Optional[Sequence[Path]] = None,
        baud: int = 115200,
    ) -> None: ...
    @property
    def id(self) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def num_groups(self) -> int: ...
    def get_function(self, name: str) -> Function: ...
    def call(self, function: Union[Function, str], *args: Union[Value, Register]) -> Register:
        """Calls `function` on every worker into a new register; returns once sent."""
    def empty(self, shape: Shape, dtype: str = "float32") -> Register: ...
    def copy_to_worker0(self, array: npt.NDArray[Any]) -> Register: ...
    def copy_to_worker0_into(self, array: npt.NDArray[Any], dst: Register) -> None: ...
    def copy_from_worker0(self, register: Register) -> npt.NDArray[Any]: ...
    def copy_from_worker0_into(self, register: Register, out: npt.NDArray[Any]) -> None: ...
    def copy_to_workers(self, arrays: Sequence[npt.NDArray[Any]]) -> Register: ...
    def sync_worker(self, worker: int) -> None: ...
    def sync_all(self) -> None: ...
    def debug_get(self, register: Register, worker: int) -> Value: ...
    def debug_set(self, register: Register, worker: int, value: Value) -> None: ...
    def allreduce(
        self,
        src: Register,
        dst: Register,
        op: ReduceOp = "sum",
        in_group: bool = False,
        order: Optional[ReduceOrder] = None,
    ) -> None: ...
    @property
    def reduce_order(self) -> ReduceOrder: ...
    @reduce_order.setter
    def reduce_order(self, order: ReduceOrder) -> None: ...
    @property
    def workers_per_rank(self) -> int: ...
    def allgather(self, src: Register, dst: Register, in_group: bool = False) -> None: ...
    def broadcast_from_worker0(self, src: Register, dst: Register, in_group: bool = False) -> None: ...
    def scatter_from_worker0(self, src: Register, dst: Register, in_group: bool = False) -> None: ...
    def gather_to_worker0(self, src: Register, dst: Register, in_group: bool = False) -> None: ...
    def send_to_worker(self, src: Register, dst: Register, *, source: int, to: int) -> None: ...
    def send_to_next_group(self, src: Register, dst: Register, group: int) -> None: ...
    def load_safetensors(
        self,
        path: Path,
        split: Mapping[str, int] = ...,
        default_split: Optional[int] = None,
        in_group: bool = False,
    ) -> dict[str, Register]: ...
    def load_presharded(self, paths: Sequence[Path]) -> dict[str, Register]: ...
    def set_deadline(self, seconds: float) -> None: ...
    def set_busy_deadline(self, seconds: float) -> None: ...
    def start_trace(self, path: Path) -> None:
        """A timeline of this process's work into `path` (Chrome trace events; one at a time)."""
    def finish_trace(self) -> Optional[int]:
        """Writes the trace: the events written, or None if none ran."""
    def shutdown(self) -> None: ...
    def __enter__(self) -> "Session": ...
    def __exit__(self, *exc: object) -> bool: ...

class Program:
    """A core program under construction: variables, streams, layers, anchors."""

    def __init__(
        self,
        batches_per_step: int = 1,
        accumulation: int = 1,
        learning_rate: float = 0.1,
        momentum: Optional[float] = None,
        micro_batch_size: int = 1,
        instrumented: bool = False,
    ) -> None: ...
    def add_variable(
        self,
        name: str,
        shape: Shape,
        group: Optional[Grouping] = None,
        retrieval: Literal["one_per_group", "all_replicas"] = "one_per_group",
        sharding: Optional[Sharding] = None,
    ) -> int: ...
    def add_stream(
        self, name: str, dtype: str, sample: Shape, broadcast: bool = False, input: bool = False
    ) -> int: ...
    def linear(self, weight: int) -> None: ...
    def bias(self, bias: int) -> None: ...
    def relu(self) -> None: ...
    def dropout(self, rate: float) -> None: ...
    def softmax_cross_entropy(self, labels: int) -> None: ...
    def mean_squared_error(self, targets: int) -> None: ...
    def add_anchor(self, tensor: Literal["loss", "output"], return_type: Optional[ReturnType] = None) -> None: ...
    def check(self, replicas: int) -> None: ...
    @property
    def variables(self) -> list[str]: ...
    @property
    def streams(self) -> list[str]: ...
    @property
    def batches_per_step(self) -> int: ...
    @property
    def accumulation(self) -> int: ...
    @property
    def micro_batch_size(self) -> int: ...

class Runtime:
    """A program prepared on its replicas (PopART's Devicex). Named arrays are read where
    NumPy keeps them, with the GIL released (C-contiguous, else ValueError); a Python
    thread writing into one during the call races.

    Under `mpirun -np N python script.py` (the package installed with MPI) every rank runs
    the script and its runtime is one instance of the job: it drives `window`, its share
    of the replicas; a step takes and returns that window's samples and anchors, while
    weights to host, RNG state and cycle counts are the whole job's on every rank."""

    def __init__(
        self,
        program: Program,
        replicas: int,
        placement: Placement = "thread",
        memory: int = 16 << 20,
        *,
        exe: Optional[Path] = None,
        firmware: Optional[Path] = None,
        ports: Optional[Sequence[Path]] = None,
        baud: int = 115200,
    ) -> None: ...
    @staticmethod
    def load_executable(
        path: Path,
        placement: Placement = "thread",
        memory: int = 16 << 20,
        *,
        exe: Optional[Path] = None,
        firmware: Optional[Path] = None,
        ports: Optional[Sequence[Path]] = None,
        baud: int = 115200,
    ) -> "Runtime": ...
    def save_executable(self, path: Path) -> None: ...
    @property
    def replicas(self) -> int: ...
    @property
    def window(self) -> range:
        """The replicas this process drives: all on one host, its share under `mpirun`."""
    @property
    def instance(self) -> int:
        """This process's instance of the job (its MPI rank; 0 on one host)."""
    @property
    def instances(self) -> int:
        """The job's instances (MPI ranks; 1 on one host)."""
    @property
    def program(self) -> Program: ...
    @property
    def rounds_per_step(self) -> int: ...
    @property
    def lost(self) -> Optional[int]: ...
    @property
    def weights_in_sync(self) -> bool: ...
    def weights_from_host(self, weights: Mapping[str, npt.NDArray[np.float32]]) -> None: ...
    def weights_to_host(self) -> dict[str, npt.NDArray[np.float32]]: ...
    def start_trace(self, path: Path) -> None:
        """A timeline of this process's work into `path` (Chrome trace events; one at a time)."""
    def finish_trace(self) -> Optional[int]:
        """Writes the trace: the events written, or None if none ran."""
    def weights_to_host_into(self, out: Mapping[str, npt.NDArray[np.float32]]) -> None:
        """Each named variable into its array, in place (float32, its returned shape)."""
    def optimizer_state_from_host(self, state: Mapping[str, npt.NDArray[np.float32]]) -> None: ...
    def optimizer_state_to_host(self) -> dict[str, npt.NDArray[np.float32]]: ...
    def run(self, inputs: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]: ...
    def set_optimizer(self, learning_rate: float, momentum: Optional[float] = None) -> None: ...
    def set_random_seed(self, seed: int) -> None: ...
    def random_seed(self) -> int: ...
    def rng_state(self) -> npt.NDArray[np.uint32]: ...
    def set_rng_state(self, words: Sequence[int]) -> None: ...
    def cycle_counts(self) -> list[int]: ...
    def save_checkpoint(
        self,
        path: Path,
        step: int,
        seed: int,
        data: Optional[Tuple[npt.NDArray[np.float32], npt.NDArray[Any]]] = None,
    ) -> None: ...
    def resume(self, path: Path) -> Tuple[int, int]: ...

def spirals(
    samples: int = 3000, classes: int = 3, seed: int = 42
) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.int32]]:
    """`tessera train`'s synthetic data: (inputs [samples, 2], labels [samples])."""

def initial_weights(program: Program, replicas: int, seed: int) -> dict[str, npt.NDArray[np.float32]]:
    """`tessera train`'s starting weights for `program`, by variable name."""

def main() -> int:
    """The `tessera` script's entry point: runs the command on sys.argv (signals then end
    the process, as the command's do); returns its exit status."""
