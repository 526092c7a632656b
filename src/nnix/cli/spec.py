"""Every verb of `nnix` (and `nnictl`), declared once: its name and aliases, arguments, options with NNI's spellings,
help text, and the function that runs it. :mod:`nnix.cli.parse` reads argv, prints help and usage errors from this
table alone; :mod:`nnix.cli.main` then imports only the module of the verb it runs.

Kept to the standard library's built-ins (no dataclasses, typing or re at run time): ``nnix --help`` and the quick
verbs import this table and nothing heavier."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

# the kinds of value an option or argument takes (what it is converted to, and its metavar in help)
FLAG, STR, INT, FLOAT, PATH = "flag", "str", "int", "float", "path"


class Opt:
    """An option: ``names`` as typed (``--config``, ``-c``; NNI's spellings among them), the keyword ``dest`` its
    value is passed as. ``low``/``high``: the bounds of a number, or ``"module:NAME"`` of a constant read only where
    it is needed. ``action``: an eager option (``--version``), ``"module:function"`` run at once."""

    __slots__ = ("action", "default", "dest", "help", "hidden", "high", "kind", "low", "names", "required")

    def __init__(self, *names: str, dest: str, help: str = "", kind: str = STR, default: object = None,
                 required: bool = False, hidden: bool = False, low: float | str | None = None,
                 high: float | str | None = None, action: str | None = None) -> None:
        self.names, self.dest, self.help, self.kind, self.default = names, dest, help, kind, default
        self.required, self.hidden, self.low, self.high, self.action = required, hidden, low, high, action
        if kind == FLAG and default is None:
            self.default = False

    def __repr__(self) -> str:
        return f"Opt{self.names!r}"


class Arg:
    """A positional argument, passed as keyword ``name``."""

    __slots__ = ("help", "kind", "name", "required")

    def __init__(self, name: str, help: str = "", required: bool = False, kind: str = STR) -> None:
        self.name, self.help, self.required, self.kind = name, help, required, kind

    @property
    def dest(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Arg({self.name!r})"


class Verb:
    """A command: ``run`` is ``"module:function"``, called with one keyword per argument and option."""

    __slots__ = ("aliases", "help", "hidden", "name", "params", "run")

    def __init__(self, name: str, help: str, run: str, *params: Opt | Arg, aliases: tuple[str, ...] = (),
                 hidden: bool = False) -> None:
        self.name, self.help, self.run, self.params = name, help, run, params
        self.aliases, self.hidden = aliases, hidden

    def __repr__(self) -> str:
        return f"Verb({self.name!r})"


class Group:
    """Verbs under one name (``nnix trial ...``); the root is the group of every verb."""

    __slots__ = ("aliases", "help", "hidden", "name", "params", "verbs")

    def __init__(self, name: str, help: str, *verbs: Verb | Group, params: tuple[Opt, ...] = ()) -> None:
        self.name, self.help, self.verbs, self.params = name, help, verbs, params
        self.aliases: tuple[str, ...] = ()
        self.hidden = False

    def find(self, name: str) -> Verb | Group | None:
        for verb in self.verbs:
            if name == verb.name or name in verb.aliases:
                return verb
        return None

    def __repr__(self) -> str:
        return f"Group({self.name!r})"


def walk(node: Verb | Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Verb | Group]]:
    """Every group and verb under ``node`` (itself first) with its path of names."""
    yield path, node
    if isinstance(node, Group):
        for verb in node.verbs:
            yield from walk(verb, (*path, verb.name))


# --- what several verbs share (declared once, used by each) ----------------------------------------------------

QUICK = "nnix.cli.quick:"
COMMANDS = "nnix.cli.commands:"
EXPERIMENT = Arg("experiment_id", "Experiment id (or unique prefix); default: the one running.")
PORT = Opt("--port", "-p", dest="port", kind=INT, default=8080, low=0, high=65535,
           help="REST/web UI port (0 = any free port).")
HOST = Opt("--host", dest="host", default="127.0.0.1",
           help="Address the REST API / web UI binds (default 127.0.0.1); any non-loopback address requires the "
                "experiment's token, printed once as a ?token= link.")
FOREGROUND = Opt("--foreground", "-f", dest="foreground", kind=FLAG,
                 help="Run in this terminal with live progress; exit when done.")
EXPERIMENT_DIR = Opt("--experiment_dir", "--experiment-dir", "-e", dest="experiment_dir", kind=PATH,
                     help="Where the experiment's directory is, if it is not registered here (NNI's experiment "
                          "root: the directory that holds it).")
JSON = Opt("--json", dest="as_json", kind=FLAG, help="A JSON list.")
TRIAL = Opt("--trial_id", "--trial-id", "-T", dest="trial_id", help="The trial.")
FOLLOW = Opt("--follow", "-f", dest="follow", kind=FLAG, help="Keep printing what is appended, until it ends.")
PATH_ONLY = Opt("--path", dest="path", kind=FLAG, help="Only print the file's path.")
YES = Opt("--yes", "-y", dest="yes", kind=FLAG, help="Do not ask for confirmation.")


def _count(*names: str, dest: str, help: str) -> Opt:
    """An option that takes a number of lines or trials."""
    return Opt(*names, dest=dest, kind=INT, low=0, help=help)


def _daemon_log(stream: str) -> Verb:
    return Verb(stream, f"The manager daemon's {stream}.", f"{COMMANDS}log_{stream}", EXPERIMENT,
                _count("--tail", "-T", dest="tail", help="Only the last N lines."),
                _count("--head", "-H", dest="head", help="Only the first N lines."), PATH_ONLY)


def _update(name: str, help: str, value: Opt) -> Verb:
    return Verb(name, help, f"{COMMANDS}update_{name}", EXPERIMENT, value)


ROOT = Group(
    "nnix", "Run NNI hyper-parameter tuning experiments (nnictl-compatible).",
    Verb("create", "Create an experiment from a config file and start it (in the background unless --foreground)."
         "\n\nExit codes with --foreground: 0 the experiment ended and at least one trial succeeded; 1 nnix could "
         "not do it (e.g. the port is busy); 2 invalid config or flags; 3 the experiment ended in ERROR (the reason "
         "is printed); 4 it ended but no trial succeeded; 130 Ctrl-C (resume it with `nnix resume ID`); 143 stopped "
         "from elsewhere (nnix stop, the web UI).", f"{QUICK}create",
         Opt("--config", "-c", dest="config", kind=PATH, required=True, help="Experiment config (NNI v1 or v2 YAML)."),
         PORT, HOST, Opt("--debug", "-d", dest="debug", kind=FLAG, help="Debug logging."), FOREGROUND,
         Opt("--url_prefix", "--url-prefix", "-u", dest="url_prefix", hidden=True),
         Opt("--id", dest="experiment_id", help="Use this experiment id.")),
    Verb("resume", "Resume a stopped (or crashed) experiment: ids, sequence numbers and tuner history continue."
         "\n\nExit codes with --foreground: as `nnix create --foreground` (0 success, 3 ERROR, 4 no trial "
         "succeeded, 130 Ctrl-C, 143 stopped from elsewhere).", f"{QUICK}resume",
         Arg("experiment_id", "Experiment id to resume.", required=True), PORT, HOST,
         Opt("--debug", "-d", dest="debug", kind=FLAG, help="Taken for nnictl; no effect on a resume."),
         FOREGROUND, EXPERIMENT_DIR),
    Verb("view", "Serve a stopped experiment read-only.", f"{QUICK}view",
         Arg("experiment_id", "Experiment id to view.", required=True), PORT, HOST, EXPERIMENT_DIR),
    Verb("stop", "Stop an experiment's manager, whatever its status: a running experiment's trials are canceled "
         "and its state is kept for resume; a finished (DONE, ERROR) or viewed one stops serving its web UI.",
         f"{QUICK}stop", EXPERIMENT,
         Opt("--all", "-a", dest="all_", kind=FLAG, help="Stop every live experiment manager."),
         Opt("--port", "-p", dest="port", kind=INT, low=0, high=65535, help="Stop the experiment on this port.")),
    Verb("top", "Watch running experiments and their trials (Ctrl-C to quit).", f"{COMMANDS}top",
         Opt("--time", "-t", dest="interval", kind=FLOAT, default=3.0, low=0.1, high=3600, help="Refresh seconds.")),
    Group("update", "Change a running experiment.",
          _update("concurrency", "Change trialConcurrency (running trials are never killed for a decrease).",
                  Opt("--value", "-v", dest="value", kind=INT, required=True, low=1,
                      high="nnix.limits:MAX_TRIAL_CONCURRENCY")),
          _update("trialnum", "Change maxTrialNumber.",
                  Opt("--value", "-v", dest="value", kind=INT, required=True, low=1,
                      high="nnix.limits:MAX_TRIAL_NUMBER")),
          _update("duration", "Change maxExperimentDuration.",
                  Opt("--value", "-v", dest="value", required=True, help="e.g. 30m, 2h, 1d")),
          _update("searchspace", "Replace the search space (the tuner sees it for its next proposals).",
                  Opt("--filename", "-f", dest="filename", kind=PATH, required=True, help="Search space JSON file."))),
    Group("trial", "List or kill trials.",
          Verb("ls", "List an experiment's trials (works on stopped experiments too), with why each one failed or "
               "stopped. Piped, the table is plain and nothing is cut.", f"{QUICK}trial_ls", EXPERIMENT,
               _count("--head", dest="head", help="The N best trials (by the default metric and the experiment's "
                      "optimize mode), best first."),
               _count("--tail", dest="tail", help="The N worst trials, worst last."),
               Opt("--json", dest="as_json", kind=FLAG, help="NNI's JSON shape (a list of trial jobs).")),
          Verb("kill", "Kill a trial (its whole process tree); it becomes USER_CANCELED.", f"{COMMANDS}trial_kill",
               EXPERIMENT, Opt(*TRIAL.names, dest="trial_id", required=True, help="Trial to kill.")),
          Verb("run-local", "Run one trial's command here, standalone (no experiment), in its code directory with "
               "its parameters (NNIX_PARAMETERS, which `import nni` reads when no experiment runs): to debug a trial. "
               "Results are printed, not recorded. Exits with the trial's exit code.", f"{COMMANDS}trial_run_local",
               EXPERIMENT, Opt(*TRIAL.names, dest="trial_id", required=True, help="The trial to run again."),
               Opt("--dry-run", dest="dry_run", kind=FLAG, help="Only print what would run."))),
    Group("experiment", "List, show, export, import and delete experiments.",
          Verb("list", "List experiments whose manager is alive, whatever their status (a finished experiment's "
               "manager keeps serving its web UI and its port until `nnix stop`); --all lists every experiment.",
               f"{COMMANDS}experiment_list",
               Opt("--all", dest="all_", kind=FLAG, help="Include experiments whose manager is not running."), JSON),
          Verb("show", "Show an experiment's profile (config, limits, times) as JSON.", f"{COMMANDS}experiment_show",
               EXPERIMENT),
          Verb("status", "Show an experiment's status, why it is in ERROR (if it is), its manager and progress.",
               f"{COMMANDS}experiment_status", EXPERIMENT,
               Opt("--json", dest="as_json", kind=FLAG,
                   help="One JSON object (status, reason, manager, counts, best).")),
          Verb("delete", "Delete stopped experiments: their directory and registry entry.",
               f"{COMMANDS}experiment_delete", EXPERIMENT,
               Opt("--all", dest="all_", kind=FLAG, help="Delete every stopped experiment."), YES),
          Verb("export", "Export trials that have a final result: parameters, value, trial id.",
               f"{COMMANDS}experiment_export", EXPERIMENT,
               Opt("--type", "-t", dest="type_", required=True, help="csv or json"),
               Opt("--filename", "-f", dest="filename", kind=PATH, required=True, help="The file to write."),
               Opt("--intermediate", "-i", dest="intermediate", kind=FLAG, help="Add intermediate results.")),
          Verb("import", "Feed prior results to the experiment's tuner.", f"{COMMANDS}experiment_import", EXPERIMENT,
               Opt("--filename", "-f", dest="filename", kind=PATH, required=True,
                   help="JSON list of {parameter, value}.")),
          Verb("save", "Save an experiment as a portable zip archive (store, config, logs, trial outputs; the code "
               "with -s), to load on another machine with `nnix experiment load`.", f"{COMMANDS}experiment_save",
               EXPERIMENT,
               Opt("--path", "-p", dest="path", kind=PATH, default=".", help="Directory to write the archive to."),
               Opt("--saveCodeDir", "--save-code-dir", "-s", dest="save_code", kind=FLAG,
                   help="Put the trial code directory in the archive too.")),
          Verb("load", "Load an archive written by `nnix experiment save`, under a new location: the paths it "
               "recorded (experiment directory, code directory, trial outputs) are rewritten. Then `nnix view ID` or "
               "`nnix resume ID`.", f"{COMMANDS}experiment_load",
               Opt("--path", "-p", dest="path", kind=PATH, required=True, help="The archive (.zip) to load."),
               Opt("--codeDir", "--code-dir", "-c", dest="code_dir", kind=PATH, required=True,
                   help="Trial code directory: where the archive's code goes (it must be new or empty), or where the "
                        "code already is."),
               Opt("--logDir", "--log-dir", "-l", dest="log_dir", kind=PATH,
                   help="Experiment root directory (default: $NNIX_HOME)."),
               Opt("--searchSpacePath", "--search-space-path", "-s", dest="search_space_path", kind=PATH,
                   help="Write the search space to this file and use it as the config's searchSpaceFile."),
               Opt("--force", dest="force", kind=FLAG, help="Replace an experiment with the same id."))),
    Group("log", "Show the manager's log and trials' output.",
          _daemon_log("stdout"), _daemon_log("stderr"),
          Verb("manager", "The experiment manager's log (log/manager.log): start, limits, each trial's start and end "
               "with its reason, assessor decisions, warnings and errors. --follow: until the manager exits.",
               f"{COMMANDS}log_manager", EXPERIMENT,
               _count("--tail", "-n", dest="tail", help="Only the last N lines."),
               FOLLOW, PATH_ONLY),
          Verb("trial", "A trial's stderr (or --stdout): its last lines, or --follow it until the trial ends. Local, "
               "remote and cluster trials alike (for a trial that ran elsewhere, the copy this machine keeps). "
               "Without -T (or with --path): where each trial's files are, with its status and reason.",
               f"{COMMANDS}log_trial", EXPERIMENT, TRIAL,
               Opt("--stdout", dest="stdout", kind=FLAG, help="Its stdout instead of its stderr."),
               _count("--tail", "-n", dest="tail", help="The last N lines (default 100)."),
               FOLLOW, PATH_ONLY)),
    Group("algo", "Tuners and assessors installed (built-in and by entry point).",
          Verb("list", "List the tuners and assessors that configs can name (entry points nnix.tuners / "
               "nnix.assessors).", f"{COMMANDS}algo_list", JSON),
          Verb("register", "Register the tuners/assessors of an NNI meta file (builtinName, className, algoType...): "
               "configs can then name them. Each class is imported to check it; built-in names are never "
               "overwritten.", f"{COMMANDS}algo_register",
               Opt("--meta_path", "--meta-path", "-m", dest="meta_path", kind=PATH, required=True,
                   help="NNI meta file (YAML)."), aliases=("reg",)),
          Verb("unregister", "Remove an algorithm registered with `nnix algo register` (built-ins cannot be removed).",
               f"{COMMANDS}algo_unregister", Arg("name", "A registered algorithm's name.", required=True),
               aliases=("unreg",)),
          Verb("show", "Show one algorithm as JSON: its meta record (registered) or its class (built-in).",
               f"{COMMANDS}algo_show", Arg("name", "An algorithm's name.", required=True))),
    Group("webui", "The web UI of an experiment.",
          Verb("url", "Print the web UI's address of an experiment whose manager serves it.", f"{COMMANDS}webui_url",
               EXPERIMENT)),
    Group("config", "An experiment's config.",
          Verb("show", "Print the experiment's config as stored (YAML, NNI's camelCase keys; runtime updates of "
               "concurrency, limits and search space applied; secrets masked).", f"{COMMANDS}config_show",
               EXPERIMENT)),
    Group("platform", "What nnix left on remote machines and cluster storage.",
          Verb("clean", "Remove what nnix left outside the experiment directories for a config's platform: on remote "
               "machines (over SSH) the agent venvs and experiment folders under remoteWorkDir; on cluster platforms "
               "the nnix folders of the shared storage. Lists what it removes and asks first (unless -y).",
               f"{COMMANDS}platform_clean",
               Opt("--config", "-c", dest="config", kind=PATH, required=True,
                   help="The experiment config whose platform to clean."), YES)),
    Group("tensorboard", "TensorBoard for trials (needs TensorBoard: the tensorboard extra of nnix).",
          Verb("start", "Start TensorBoard on trials' NNI_OUTPUT_DIR/tensorboard (or their output directories), "
               "through the experiment's manager (running or viewed); it stops with the manager or with `nnix "
               "tensorboard stop`.", f"{COMMANDS}tensorboard_start", EXPERIMENT,
               Opt(*TRIAL.names, dest="trial_id", help="Trial ids, comma-separated (default: every started trial)."),
               Opt("--port", dest="port", kind=INT, low=0, high=65535,
                   help="TensorBoard's port (default: any free one).")),
          Verb("stop", "Stop the experiment's TensorBoard processes.", f"{COMMANDS}tensorboard_stop", EXPERIMENT,
               Opt("--id", dest="task", help="Stop only this TensorBoard task."))),
    params=(Opt("--version", "-v", dest="version", kind=FLAG, help="Print the version.",
                action=f"{QUICK}show_version"),),
)
