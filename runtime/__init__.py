"""The machinery a run stands on, apart from what it computes: the command line's one-line errors, workdirs
bound to their config, locks, atomic writes, checkpoints, interrupts, devices and profiling."""
