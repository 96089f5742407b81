"""Metrics to `metrics.jsonl` (the file contract of docs/design.md), to TensorBoard event files in the
workdir and to Weights & Biases."""
import json
import os
import secrets
import socket
import textwrap
import urllib.parse

import tensorboardX
from tensorboardX.proto.event_pb2 import Event, SessionLog

from analysis import shape
from runtime import atomic, devices, workdirs


# Set by `wandb agent` for each run it starts: the run's id (the same when the sweep requeues a run marked
# pre-empted) and the sweep's id.
RUN_ID_VAR, SWEEP_ID_VAR = "WANDB_RUN_ID", "WANDB_SWEEP_ID"
RUN_ID_PLACEHOLDER = "{wandb_run_id}"  # in train.py's --workdir: one workdir per agent run
METRICS_FILE = "metrics.jsonl"
CONFIG_TEXT_TAG = "config"  # TensorBoard's text tab: the resolved config
PLOTS = {"plots/attention": "attention.png", "plots/spectra": "spectra.png"}  # tag -> the file under plots/
RUN_ID_FILE = "wandb_id.txt"
DEFAULT_SERVER = "https://api.wandb.ai"
SERVER_TIMEOUT_S = 5  # to open a connection to the W&B server: W&B itself retries for minutes
OFFLINE = "or train without the server: WANDB_MODE=offline (then `wandb sync <workdir>/wandb/offline-run-*`)"


class WandbError(RuntimeError):
    """W&B cannot log this run: its one line names what to do."""


def wandb_mode(config) -> str:
    return os.environ.get("WANDB_MODE") or config.wandb.mode


def resolve_workdir(workdir: str) -> str:
    """`workdir` with RUN_ID_PLACEHOLDER replaced by the agent's run id, so that each run of a sweep trains
    in its own workdir and a run the agent resumes finds its checkpoints."""
    if RUN_ID_PLACEHOLDER not in workdir:
        return workdir
    run_id = os.environ.get(RUN_ID_VAR)
    if not run_id:
        raise workdirs.WorkdirError(f"--workdir={workdir} holds {RUN_ID_PLACEHOLDER}, filled from "
                                    f"${RUN_ID_VAR}, which is not set; `wandb agent` sets it, outside a sweep name the "
                                    f"workdir")
    return workdir.replace(RUN_ID_PLACEHOLDER, run_id)


def check_wandb(config, workdir: str) -> None:
    """Refuses, in seconds and before the workdir is touched, a run that W&B could not log: a wandb_id.txt
    that holds no run id, and online, no API key or no server that answers. W&B's own failures come after
    the run started (or after minutes of retries), in its tracebacks."""
    mode = wandb_mode(config)
    if mode == "disabled":
        return
    import wandb

    id_path = os.path.join(workdir, RUN_ID_FILE)
    if os.path.isfile(id_path):
        with open(id_path, encoding="utf-8", errors="replace") as f:
            run_id = f.read().strip()
        try:
            wandb.Settings(run_id=run_id)
        except Exception as error:  # noqa: BLE001 - W&B's validation error, whatever its class
            reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            raise WandbError(f"{id_path}: not a W&B run id ({run_id[:40]!r}: {reason}); delete the file and rerun: "
                             f"training resumes from its checkpoints, in a new W&B run") from None
    if mode != "online":
        return
    server = os.environ.get("WANDB_BASE_URL") or DEFAULT_SERVER
    if not _has_api_key():
        raise WandbError(f"WANDB_MODE=online, but W&B has no API key: run `wandb login` (or set WANDB_API_KEY), "
                         f"{OFFLINE}")
    _check_server(server)


def _has_api_key() -> bool:
    """Whether W&B finds credentials: its environment variables, else W&B's own lookup (wandb.login without a
    prompt or a server check: its settings files, then the netrc entry `wandb login` writes). That lookup answers
    at once where it finds none; where it finds one it starts W&B's service (seconds), which the run's wandb.init
    then uses."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    import wandb  # imported only when used, as above

    return bool(wandb.login(prompt=False, verify=False))


def _check_server(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=SERVER_TIMEOUT_S).close()
    except (OSError, ValueError, TypeError) as error:
        raise WandbError(f"the W&B server {url} does not answer ({error}); check the network (or WANDB_BASE_URL), "
                         f"{OFFLINE}") from None


def _run_id(workdir: str) -> str:
    """The W&B run id of the workdir, kept in wandb_id.txt so that a resumed run continues the same W&B
    run: the agent's run id under `wandb agent` (or wherever $WANDB_RUN_ID is set), else a fresh one."""
    id_path = os.path.join(workdir, RUN_ID_FILE)
    given = os.environ.get(RUN_ID_VAR)
    if not os.path.exists(id_path):
        atomic.write_text(id_path, given or secrets.token_hex(4))
    with open(id_path) as f:
        run_id = f.read().strip()
    if given and given != run_id:
        raise workdirs.WorkdirError(f"{workdir} holds W&B run {run_id}, but ${RUN_ID_VAR} is {given}: each run "
                                    f"of a sweep needs its own workdir, e.g. "
                                    f"--workdir=runs/agent/<task>/{RUN_ID_PLACEHOLDER}")
    return run_id


def reaches_stop(config, validation: dict) -> bool:
    """Whether validation metrics reach eval.stop_at in eval.stop_metric (never where unset). `config`: the
    run's ConfigDict, or its config.json's dict (a study's parent process reads that)."""
    metric = config["eval"].get("stop_metric")
    return bool(metric) and validation[metric] >= config["eval"]["stop_at"]


def stopped_early_at(config, workdir: str, step) -> bool:
    """Whether the run's validation at `step`, before its last, reached the early stop (metrics.jsonl)."""
    if not config.get("eval", {}).get("stop_metric") or not isinstance(step, int) or step >= config["num_train_steps"]:
        return False
    return any(row["step"] == step and row["split"] == "eval" and reaches_stop(config, row)
               for row in read_metrics(workdir))


def ends_run(config, workdir: str, step) -> bool:
    """Whether an evaluation at `step` (eval.json's) is the run's final one: at its last step, or at the
    validation that stopped it early."""
    return step == config["num_train_steps"] or stopped_early_at(config, workdir, step)


def read_metrics(directory: str) -> list[dict]:
    """The lines of `directory`'s metrics.jsonl, in order; none without the file (a run not started yet).
    A last line cut short (a kill or a full disk during a write) is left out with a warning; an unreadable
    line before it is a WorkdirError naming file:line."""
    path = os.path.join(directory, METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [(number, line) for number, line in enumerate(f, 1) if line.strip()]
    records = []
    for index, (number, line) in enumerate(lines):
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError("not a metrics record")
        except ValueError:
            if index < len(lines) - 1:
                raise workdirs.WorkdirError(f"{path}:{number}: not a line of metrics (JSON with a step); "
                                            f"delete that line to go on") from None
            print(f"warning: {path}:{number}: its last line is cut short (a write stopped midway); it is "
                  f"left out", flush=True)
            continue
        records.append(record)
    return records


def evaluation_scalars(result: dict) -> dict[str, float]:
    """eval.json's numbers by tag: test metrics `test/<metric>`, ranks `rank/<role>/layer<i>/<metric>`,
    row shapes `shape/<role>/layer<i>/<metric>` (every query row; a selection of them, MLM's parts,
    `shape/<role>/layer<i>/<selection>/<metric>`), all means over heads, and attention state sizes
    `state/<role>/{per_head,total,feature_dim}`."""
    scalars = {f"test/{key}": value for key, value in result["metrics"].items()}
    rows = result["rank"]
    for role, layer in dict.fromkeys((row["role"], row["layer"]) for row in rows):
        heads = [row for row in rows if (row["role"], row["layer"]) == (role, layer)]
        for metric in ("numerical", "effective", "stable"):
            values = [row[f"{metric}_rank"] for row in heads]
            scalars[f"rank/{role}/layer{layer}/{metric}"] = sum(values) / len(values)
    scalars.update(_shape_scalars(result.get("shape", [])))  # a task may write no shape rows
    for role, state in result.get("state", {}).items():
        scalars.update({f"state/{role}/{key}": state[key] for key in ("per_head", "total")})
        if state["feature_dim"] is not None:
            scalars[f"state/{role}/feature_dim"] = state["feature_dim"]
    return scalars


def _shape_scalars(rows: list[dict]) -> dict[str, float]:
    """The shape rows' metrics by tag, means over the heads that have one (a logit spread is None outside
    the softmax family, an entropy fraction None over rows of a single key)."""
    scalars = {}
    for role, layer, selection in dict.fromkeys((row["role"], row["layer"], row["query_rows"]) for row in rows):
        heads = [row for row in rows if (row["role"], row["layer"], row["query_rows"]) == (role, layer, selection)]
        prefix = f"shape/{role}/layer{layer}" + ("" if selection == shape.ALL_ROWS else f"/{selection}")
        for metric in shape.METRIC_NAMES:
            values = [row[metric] for row in heads if row.get(metric) is not None]  # older rows lack the last two
            if values:
                scalars[f"{prefix}/{metric}"] = sum(values) / len(values)
    return scalars


def _spectra_charts(workdir: str) -> dict:
    """spectra.json as W&B line charts, `spectra/<role>/layer<i>`: s / s_max against its index, data that
    W&B can draw over several runs (where an image of the plot cannot be)."""
    import wandb

    path = os.path.join(workdir, "spectra.json")
    if not os.path.exists(path):  # a model without attention
        return {}
    charts = {}
    for role, layers in workdirs.read_json(path).items():
        for layer, spectrum in enumerate(layers):
            table = wandb.Table(columns=["index", "s / s_max"], data=[[i, s] for i, s in enumerate(spectrum)])
            charts[f"spectra/{role}/layer{layer}"] = wandb.plot.line(
                table, "index", "s / s_max", title=f"singular values, {role} layer {layer}")
    return charts


class _EventFile:
    """tensorboardX's writer of one event file, called from its own thread as well as from this one, guarded
    as the workdir's other writes are: the first OSError (a full disk, a file-size limit) is kept rather than
    raised, and the writes after it dropped. Raised in that thread, it would end the thread in a traceback
    (add_* would then wait forever on its full queue), and tensorboardX's close at exit would print another;
    MetricsWriter raises it in the main thread instead, as the one-line error."""

    def __init__(self, records):
        self.records, self.path, self.failure = records, records.path, None

    @classmethod
    def guard(cls, events: tensorboardX.SummaryWriter, purge_step: int) -> "_EventFile":
        """Puts the guard in front of `events`' file, then writes the events of SummaryWriter's purge_step
        (TensorBoard hides the earlier files' steps from it on): the writer is made without it, so that its
        thread has nothing to write before the guard is there."""
        writer = events.file_writer.event_writer._ev_writer  # private: requirements.txt pins tensorboardX
        with writer._lock:
            guarded = writer._py_recordio_writer = cls(writer._py_recordio_writer)
        for event in (Event(step=purge_step, file_version="brain.Event:2"),
                      Event(step=purge_step, session_log=SessionLog(status=SessionLog.START))):
            events.file_writer.add_event(event)
        return guarded

    def _kept(self, operation, *args) -> None:
        if self.failure is None:
            try:
                operation(*args)
            except OSError as error:
                self.failure = error

    def write(self, data: bytes) -> None:
        self._kept(self.records.write, data)

    def flush(self) -> None:
        self._kept(self.records.flush)

    def close(self) -> None:
        try:  # the file closes even where its last flush fails: none is left for the exit to flush again
            self.records.close()
        except OSError as error:
            self.failure = self.failure or error

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise atomic.user_error(self.path, self.failure) from self.failure


class MetricsWriter:
    """Appends `{"step", "split", "elapsed_s", ...}` lines; on resume, first drops lines written after
    the restored step, so the file reads as if the run had never been interrupted. Every metric also goes
    to TensorBoard event files in the workdir, and to W&B when it is on."""

    def __init__(self, workdir: str, config, resume_step: int, kinds: tuple[str, ...] = (), headline: str = "",
                 to_wandb: bool = True):
        """`kinds`: the attention kinds of the run's model, its W&B tags with the task; `headline`: the task's
        headline metric, the one TensorBoard's hparams tab shows. `to_wandb=False`: never to W&B, whatever
        the config or $WANDB_MODE say (the hosts after the first of a multi-host run)."""
        self.path = os.path.join(workdir, METRICS_FILE)
        kept = self._kept_until(workdir, resume_step)  # read (a damaged file refused) before W&B starts,
        on = to_wandb and wandb_mode(config) != "disabled"
        self.run = self._start_wandb(workdir, config, kinds) if on else None
        if kept is not None:  # written after it: a run that W&B refuses leaves metrics.jsonl as it was
            atomic.write_text(self.path, kept)
        # A new event file per start; TensorBoard hides what earlier files hold from purge_step on, as
        # the rewrite above drops those lines. The suffix keeps two starts within a second (the file's name is
        # the second it opened) from overwriting one another.
        try:
            self.events = tensorboardX.SummaryWriter(workdir, filename_suffix=f".{secrets.token_hex(4)}")
        except OSError as error:  # the file cannot be made: a read-only disk, no inode left
            raise atomic.user_error(error.filename or workdir, error) from error
        self._event_file = _EventFile.guard(self.events, purge_step=resume_step + 1)
        self._session_end = self._log_config(config, resume_step, headline)  # written once evaluated

    def _log_config(self, config, step: int, headline: str):
        """The resolved config to TensorBoard's text tab, and its fields with a single value (a study varies
        some of them) as the hparams tab's hyperparameters, the headline metric on validation and test as
        its metrics. Returns the summary that ends the hparams session, for close()."""
        record = workdirs.config_record(config)
        # Indented: a code block in the text tab's markdown, so the JSON keeps its lines.
        self.events.add_text(CONFIG_TEXT_TAG, textwrap.indent(json.dumps(record, indent=1), "    "), step)
        hyperparameters = {field: value for field, value in workdirs.flatten(record).items()
                           if isinstance(value, (bool, int, float, str))}
        experiment, session_start, session_end = tensorboardX.summary.hparams(
            hyperparameters, dict.fromkeys(f"{split}/{headline}" for split in ("eval", "test")))
        for summary in (experiment, session_start):
            self.events.file_writer.add_summary(summary, step)
        return session_end

    def _kept_until(self, workdir: str, step: int) -> str | None:
        """metrics.jsonl without its lines after `step`; None where it has none to drop (or no file)."""
        if not os.path.exists(self.path):
            return None
        kept = [record for record in read_metrics(workdir) if record["step"] <= step]
        text = "".join(json.dumps(record) + "\n" for record in kept)
        with open(self.path, encoding="utf-8", errors="replace") as f:
            return None if f.read() == text else text

    @staticmethod
    def _start_wandb(workdir: str, config, kinds: tuple[str, ...]):
        import wandb  # imported only when used: it is slow to import and tests disable it

        # The run's own lines are its terminal's: no summary after its closing line, and no capture of
        # stdout, whose wrapping by W&B delays lines written to a file (train.log keeps them for a study).
        quiet = wandb.Settings(quiet=True, console="off")

        run_id, sweep_id = _run_id(workdir), os.environ.get(SWEEP_ID_VAR)
        # In a sweep, W&B takes the project and the run id from the agent and ignores (with a warning)
        # those passed here; the runs of a sweep share a group, the sweep's unless the config names one.
        try:
            return wandb.init(project=None if sweep_id else config.wandb.project,
                              group=config.wandb.group or sweep_id or None, mode=wandb_mode(config), dir=workdir,
                              id=None if sweep_id else run_id, resume="allow",
                              config={**config.to_dict(), "runtime": devices.runtime()},
                              tags=[config.task, *kinds], settings=quiet)
        except Exception as error:  # noqa: BLE001 - W&B raises its own classes, and those of its service
            raise WandbError(f"W&B did not start the run ({atomic.first_line(error)}); check the network and "
                             f"`wandb login`, {OFFLINE}") from error

    def write(self, step: int, split: str, elapsed_s: float, metrics: dict) -> None:
        record = {"step": step, "split": split, "elapsed_s": round(elapsed_s, 3), **metrics}
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as error:  # a line cut short is dropped when the run resumes
            raise atomic.user_error(self.path, error) from error
        self._log_scalars(step, {f"{split}/{key}": value for key, value in metrics.items()})

    def _log_scalars(self, step: int, scalars: dict) -> None:
        for tag, value in scalars.items():
            self.events.add_scalar(tag, value, step)
        self.events.flush()  # every log_every_steps at most: a killed run's events reach its last line
        self._event_file.raise_failure()
        if self.run is not None:
            self.run.log(scalars, step=step)

    def log_evaluation(self, step: int, result: dict, workdir: str) -> None:
        """eval.json's evaluation_scalars to TensorBoard and W&B; to TensorBoard also the heat maps and spectra
        as images (with config.eval.plots); to W&B the rank and shape rows as tables, spectra.json as line
        charts and the attention heat maps as an image."""
        self._log_scalars(step, evaluation_scalars(result))
        self._log_plots(step, workdir)
        self.events.file_writer.add_summary(self._session_end, step)  # the hparams session: trained to its end
        if self.run is None:
            return
        import wandb

        logged = _spectra_charts(workdir)
        for key in ("rank", "shape"):
            if rows := result.get(key):
                logged[f"{key}/table"] = wandb.Table(columns=list(rows[0]), data=[list(row.values()) for row in rows])
        if os.path.exists(path := os.path.join(workdir, "plots", PLOTS["plots/attention"])):
            logged["plots/attention"] = wandb.Image(path)
        self.run.log(logged, step=step)

    def _log_plots(self, step: int, workdir: str) -> None:
        from matplotlib import image  # imported only here: a run's metrics need no plotting library

        for tag, name in PLOTS.items():
            if os.path.exists(path := os.path.join(workdir, "plots", name)):
                self.events.add_image(tag, image.imread(path), step, dataformats="HWC")

    def mark_preempted(self) -> None:
        """Tells W&B the run stopped to be resumed: in a sweep, the agent then requeues it with the same
        run id, hence the same workdir, where it resumes from its checkpoint."""
        if self.run is not None:
            self.run.mark_preempting()

    def close(self) -> None:
        self.events.close()
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as error:  # noqa: BLE001 - the run's results are in the workdir whatever W&B says
                print(f"warning: W&B did not finish its run ({atomic.first_line(error)}); the training and its files "
                      f"in the workdir are complete; `wandb sync` uploads the run's directory in wandb/", flush=True)
        self._event_file.raise_failure()  # after W&B's finish, which the run's other files do not wait on

