"""Data parallelism over every device of every host: a one-axis mesh, batches split along it, and the
train state either replicated or FSDP-sharded. The same code runs on one CPU, one GPU, a TPU slice or
several hosts: only the number of devices changes.

Every host computes the step's whole global batch (a function of (seed, step)) and hands over only
the rows its own devices hold, so the batches do not depend on the number of hosts or devices.
"""
import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "data"
PARAMS = ("replicated", "fsdp")  # config.sharding.params


def initialize(config) -> None:
    """jax.distributed.initialize() when config.distributed; it must run before anything touches a device.
    JAX detects the coordinator, host count and host index on the clusters it knows; elsewhere they come
    from JAX_COORDINATOR_ADDRESS (read by JAX), JAX_NUM_PROCESSES and JAX_PROCESS_ID."""
    if config.distributed:
        given = {name: int(os.environ[variable]) for name, variable in
                 (("num_processes", "JAX_NUM_PROCESSES"), ("process_id", "JAX_PROCESS_ID"))
                 if variable in os.environ}
        jax.distributed.initialize(**given)


def finish(config) -> None:
    """jax.distributed.shutdown() when config.distributed: every process waits there for the others (JAX's
    shutdown barrier, which aborts them all after its timeout), so each calls it right after the work they
    share, not at its exit, after what it alone does."""
    if config.distributed:
        jax.distributed.shutdown()


def data_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), (AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh, ndim: int = 1) -> NamedSharding:
    """Rows over the devices; a scalar (ndim 0) is replicated."""
    return NamedSharding(mesh, PartitionSpec(AXIS) if ndim else PartitionSpec())


def fsdp_spec(shape: tuple[int, ...], num_devices: int) -> PartitionSpec:
    """The largest axis that splits evenly over the devices (the first of equals), else replicated."""
    divisible = [axis for axis, size in enumerate(shape) if size % num_devices == 0]
    if not divisible:
        return PartitionSpec()
    axis = max(divisible, key=lambda a: (shape[a], -a))
    return PartitionSpec(*[AXIS if a == axis else None for a in range(len(shape))])


def state_shardings(state: dict, mesh: Mesh, params: str) -> dict:
    """Shardings of the train state {step, params, rest, opt_state}. Under "fsdp" the rule goes by shape
    alone, so Adam's moments shard like their parameters; `step` and `rest` (RNG state) stay replicated."""
    def rule(x):
        if params == "replicated":
            return replicated(mesh)
        return NamedSharding(mesh, fsdp_spec(np.shape(x), mesh.size))

    return {"step": replicated(mesh), "rest": jax.tree.map(lambda _: replicated(mesh), state["rest"]),
            "params": jax.tree.map(rule, state["params"]),
            "opt_state": jax.tree.map(rule, state["opt_state"])}


def _put_global(x, sharding: NamedSharding):
    """`x`, the same on every host, as a global array (jax.device_put takes only this host's devices)."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # placed as its raw bits
        bits = _put_global(jax.random.key_data(x), sharding)
        return jax.random.wrap_key_data(bits, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def put_state(state: dict, mesh: Mesh, params: str) -> tuple[dict, dict]:
    """(the state placed on the mesh, its shardings): what a checkpoint restores onto and the steps keep."""
    shardings = state_shardings(state, mesh, params)
    return jax.tree.map(_put_global, state, shardings), shardings


def global_batch_size(per_device_batch_size: int) -> int:
    return per_device_batch_size * jax.device_count()


def padded_batch_size(batch_size: int, mesh: Mesh | None) -> int:
    """`batch_size` rounded up to a multiple of the devices, so that every device gets the same rows."""
    devices = 1 if mesh is None else mesh.size
    return -(-batch_size // devices) * devices


def host_rows(mesh: Mesh, global_size: int) -> slice:
    """The rows of a global batch that this host's devices hold (all of them on a single host)."""
    indices = batch_sharding(mesh).addressable_devices_indices_map((global_size,)).values()
    return slice(min(index[0].indices(global_size)[0] for index in indices),
                 max(index[0].indices(global_size)[1] for index in indices))


def put_batch(batch: dict, mesh: Mesh | None) -> dict:
    """The global batch as jax.Arrays split over the mesh, from the whole batch every host computed: each
    host contributes only its rows. With no mesh (parameters on one device), the batch as it is."""
    if mesh is None:
        return batch
    rows = host_rows(mesh, len(next(a for a in batch.values() if np.ndim(a))))

    def put(array):
        array = np.asarray(array)
        local = array[rows] if array.ndim else array
        return jax.make_array_from_process_local_data(batch_sharding(mesh, array.ndim), local, array.shape)

    return {name: put(array) for name, array in batch.items()}


def mesh_of(tree) -> Mesh | None:
    """The mesh the arrays of `tree` are placed on; None when they sit on a single device."""
    placement = jax.tree.leaves(tree)[0].sharding
    return placement.mesh if isinstance(placement, NamedSharding) else None
