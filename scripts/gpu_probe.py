"""The one-shot check of a lent GPU machine, about 8 minutes, offline: what scripts/gpu_probe.sh runs.

  scripts/gpu_probe.sh --out=$OUT                       # on the machine, `wheelhouse` carried (make wheelhouse)
  scripts/gpu_probe.sh --smoke --out=/tmp/probe --wheelhouse=none      # toy sizes, on a CPU, about a minute
  PROBE_STUDY=mlm:full scripts/gpu_probe.sh --steps=install,versions,study --budget_s=540 --out=$OUT
  python -m scripts.gpu_probe --check=pallas --json=/tmp/pallas.json  # one check a step runs, in this process

The steps, in priority order, each one process capped by `timeout` within --budget_s (a step the budget leaves
under 15 s is skipped; benchmarks/probe.py):
  install       the wheels of --wheelhouse into --site (pip --no-index --no-deps), then on PYTHONPATH
  versions      Python and every pinned package (against requirements.txt), triton, pip check, jax.devices()
  tests         the accelerator tests (TEST_ACCELERATOR=1 pytest -m accelerator), the GPU-specific files
                first, each test capped by pytest-timeout where it is installed (smoke: tests/test_prefetch.py)
  pallas_check  the Pallas kernels of causal linear attention against the XLA path, output and gradients, at
                every feature width, value width and chunk the kernels take (benchmarks/probe_checks.py)
  pallas_times  python -m scripts.bench_linear_paths: the XLA path against the kernels at chunks 32, 64, 128,
                B*H = 128, L = 1K..16K
  attention     python -m scripts.bench_attention: softmax in cuDNN's flash kernel against linear attention,
                bfloat16, B*H = 128, L = 2K..32K: where linear starts to win
  mlm_train     python -m scripts.bench_train: configs/mlm.py and configs/mlm.py:mfu at L = 512 in bfloat16, fixed,
                prefetched and device-built batches, 5 rounds of 100 steps: steps/s, tokens/s, MFU from model FLOPs
  study         in the time left, `python -m scripts.compare` on --study (task:preset) in --study_dtype, the
                runs --study_runs, --study_seeds seeds each: by default MLM rank_or_shape's arms at L = 512, 2
                seeds, in bfloat16 (PROBE_STUDY= , empty, skips it); its report folder and its runs' workdirs
                without checkpoints come back as study.tgz, packed again every 30 s while it runs;
                --study_resume_from=<an earlier study.tgz> skips the runs it finished and merges its runs.json.
                Zoology's Figure 2 cells: --study=recall:zoology --study_runs= --study_seeds=1 --study_dtype=
                --study_jobs=4 (small models: four share the GPU). A float32 study (--study_dtype= or float32)
                runs its matmuls at the highest precision, so its runs join CPU runs' contrasts: e.g. the controls'
                seeds 3-4, --study=mlm:rank_or_shape_controls --study_runs=landmark32,softmax_capped
                --study_seeds=0 --study_dtype= (and their borrowed runs' in mlm:rank_or_shape, a second call).
                With --smoke: mlm's tiny study, one seed
After every step --out holds summary.md, results.json (every step's status, seconds and findings), logs.txt
(each step's log, cut to its head and tail) and the benchmarks' reports: at most 8 files, none in a folder,
as a lent machine gives them back. WANDB_MODE=disabled throughout. Exit status 1 if a step failed or timed out.

--check runs one of the in-process checks (the steps `versions` and `pallas_check` call it), its JSON to --json.
"""
import os
import sys

from absl import flags

from benchmarks import probe
from scripts import command_line

FLAGS = flags.FlagValues()
flags.DEFINE_string("out", os.environ.get("OUT", "runs/probe"), "where the results go (default $OUT, else "
                    "runs/probe; relative: to the repository)", flag_values=FLAGS)
flags.DEFINE_bool("smoke", False, "every step at toy sizes (a CPU runs them in about a minute)", flag_values=FLAGS)
flags.DEFINE_string("wheelhouse", "wheelhouse", "the folder of wheels the step `install` installs (make "
                    "wheelhouse); none: the interpreter's own packages only", flag_values=FLAGS)
flags.DEFINE_string("site", os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpu-probe-site"), "the --target "
                    "folder the wheels go to, emptied first", flag_values=FLAGS)
flags.DEFINE_string("work", "", "the steps' own outputs and logs (default: a new temporary folder)",
                    flag_values=FLAGS)
flags.DEFINE_float("budget_s", None, "seconds for all the steps (default 450; smoke 240)", flag_values=FLAGS)
flags.DEFINE_string("steps", "", f"comma-separated subset of {', '.join(step.name for step in probe.STEPS)}; "
                    "the others are recorded as skipped", flag_values=FLAGS)
flags.DEFINE_string("study", os.environ.get("PROBE_STUDY", "mlm:rank_or_shape"), "the study the step `study` "
                    "runs, task:preset (default $PROBE_STUDY, else mlm:rank_or_shape; empty: skipped)",
                    flag_values=FLAGS)
flags.DEFINE_string("study_runs", "softmax_L512,linear_L512", "the study's runs it trains (empty: all)",
                    flag_values=FLAGS)
flags.DEFINE_integer("study_seeds", 2, "seeds of each run (0: each run's own, as the study gives them)",
                     lower_bound=0, flag_values=FLAGS)
flags.DEFINE_string("study_dtype", "bfloat16", "the study's config.compute_dtype (empty: the config's own)",
                    flag_values=FLAGS)
flags.DEFINE_string("study_resume_from", "", "a study.tgz an earlier probe brought back: its finished runs are "
                    "skipped and its runs.json merged into the new report", flag_values=FLAGS)
flags.DEFINE_integer("study_jobs", 0, "the study's training processes at once, sharing the GPU (0: one per GPU)",
                     lower_bound=0, flag_values=FLAGS)
flags.DEFINE_enum("check", None, ("versions", "pallas"), "run this check in this process instead of the probe",
                  flag_values=FLAGS)
flags.DEFINE_string("json", "", "--check: where its JSON goes", flag_values=FLAGS)
flags.DEFINE_float("deadline_s", 1e9, "--check=pallas: start no case after this many seconds", flag_values=FLAGS)
flags.DEFINE_string("requirements", os.path.join(probe.REPOSITORY, "requirements.txt"), "--check=versions: the "
                    "pins read", flag_values=FLAGS)


def main(argv=None) -> int:
    options = command_line.parse(FLAGS, argv, __doc__)
    if unknown := set(filter(None, options.steps.split(","))) - {step.name for step in probe.STEPS}:
        command_line.fail(f"--steps: {', '.join(sorted(unknown))}: no such step")
    if options.check:
        if not options.json:
            command_line.fail("--check needs --json")
        from benchmarks import probe_checks  # here, not above: the probe itself holds no device (JAX)

        return probe_checks.run(options)
    return probe.run(options)


if __name__ == "__main__":
    sys.exit(main())
