"""``nunet-tui``: the full-screen app without a subcommand; scripting commands with one.

The scripting commands mirror the NuNet CLI. Each prints one JSON object with ``--json``,
exits 0 on success, and otherwise prints a one-line error on stderr and exits non-zero
(1: the engine refused or failed, 2: the command line itself was wrong).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine import api
from engine.client import EngineClient
from engine.config import Paths
from engine.domain.safe_text import safe
from engine.errors import EngineError
from nunet_tui.cli import output
from nunet_tui.cli.output import bounded_int

Runner = Callable[[argparse.Namespace, EngineClient], Any]
# SQLite's INTEGER: a larger chat request id could only fail deep in the store.
MAX_ROW_ID = (1 << 63) - 1


class Parser(argparse.ArgumentParser):
    """A usage error is one line, and argparse repeats the user's words in it (``invalid
    choice: '…'``): escaped, like every other line the CLI writes."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {safe(message)} (see {self.prog} --help)\n")


def version() -> str:
    """The installed distribution's version (a wheel, pipx or an editable checkout)."""
    from importlib import metadata

    try:
        return metadata.version("nunet-tui")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Version(argparse.Action):
    """``--version``: the distribution's version is read only when asked (importlib.metadata
    is 40 ms that every other command would pay while its parser is built)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        print(f"{parser.prog} {version()}")  # on stdout, as argparse's own action prints it
        parser.exit(0)


def _add_app_options(parser: argparse.ArgumentParser) -> None:
    """The options that come before any command (the full-screen app takes only these)."""
    parser.add_argument(
        "--home",
        metavar="DIR",
        help="keep config, state, logs and keys in DIR (default: per-user dirs; env NUNET_HOME)",
    )
    parser.add_argument(
        "--listen",
        action="append",
        metavar="MULTIADDR",
        help="listen on this libp2p address (repeatable; config network.listen)",
    )
    parser.add_argument(
        "--bootstrap",
        action="append",
        metavar="MULTIADDR",
        help="bootstrap peer /ip4/…/tcp/…/p2p/12D3KooW… (repeatable)",
    )
    parser.add_argument(
        "--attach", action="store_true", help="insist on a running daemon for this home"
    )


class _MoreThanTheApp(Exception):
    pass


class _AppOnlyParser(Parser):
    """A quick parser (the app's options alone, a plain demo, one command's): any error goes
    back to the whole parser, which words it."""

    def error(self, message: str) -> Any:
        raise _MoreThanTheApp(message)


def _app_options_then(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]] | None:
    """The app's options in ``argv`` and the words after them; None when they do not parse.
    The same long options as the full parser's top level, so abbreviations (--hom, --att)
    resolve, or fail as ambiguous (--h), exactly as there."""
    quick = _AppOnlyParser(prog="nunet-tui", add_help=False)
    quick.add_argument("-h", "--help", action="store_true")
    quick.add_argument("--version", action="store_true")
    quick.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    _add_app_options(quick)
    try:
        return quick.parse_known_args(argv)
    except _MoreThanTheApp:
        return None


def _app_only(argv: Sequence[str]) -> argparse.Namespace | None:
    """The arguments when they ask for the full-screen app and nothing else (the options
    before any command): the commands' modules and the full parser are then never loaded,
    which the app's first frame would wait for. None: anything more, help or an error, for
    the full parser to handle as it always does."""
    if "--" in argv or (parsed := _app_options_then(argv)) is None:
        return None
    args, rest = parsed
    if rest or args.help or args.version:
        return None
    args.command = None
    return args


def _add_demo_options(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--no-tui", action="store_true", help="print the sandbox as JSON and wait")
    demo.add_argument("--root", metavar="DIR", help="keep the sandbox's nodes in DIR")


def _demo_only(argv: Sequence[str]) -> argparse.Namespace | None:
    """The arguments of a plain ``demo`` (the app's options, then ``demo`` and its own):
    the full parser imports every command's output module (0.45 s of CPU) before the
    sandbox could start. None: anything else, for the full parser (help, errors)."""
    if "demo" not in argv or "--" in argv or any(w in ("-h", "--help") for w in argv):
        return None
    quick = _AppOnlyParser(prog="nunet-tui", add_help=False)
    _add_app_options(quick)
    sub = quick.add_subparsers(dest="command", required=True)
    _add_demo_options(sub.add_parser("demo", add_help=False))
    try:
        return quick.parse_args(argv)
    except _MoreThanTheApp:
        return None


def _parse(words: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The command line parsed by the parser of its one command when it names one plainly
    (a command then loads one output module, not all nine: ~0.1 s of every call), else, and
    for help, completion and any error, by the whole parser."""
    if (word := _command_word(words)) is not None:
        try:
            parser = build_parser(word, parser_class=_AppOnlyParser)
            return parser, parser.parse_args(words)
        except _MoreThanTheApp:
            pass
    parser = build_parser()
    return parser, parser.parse_args(words)


def _command_word(argv: Sequence[str]) -> str | None:
    """The command that ``argv`` runs, past the app's options (``--home DIR``); None for
    help, ``--version``, completion or anything unclear."""
    if "--" in argv or any(w in ("-h", "--help") for w in argv):
        return None
    if (parsed := _app_options_then(argv)) is None:
        return None
    args, rest = parsed
    if args.version or not rest or rest[0] in ("completion", "demo"):
        return None
    return rest[0] if rest[0] in COMMAND_MODULES or rest[0] in OWN_COMMANDS else None


# The commands whose parsers and runners live in an output module, by the command's first word.
COMMAND_MODULES = {
    "gpu": "gpu_output",
    "onboard-ml": "gpu_output",
    "job": "job_output",
    "wallet": "wallet_output",
    "reward": "reward_output",
    "account": "account_output",
    "log": "log_archive",
    "notebook": "notebook",
    "resource": "resource",
    "data": "data_output",
    "overlay": "overlay",
}


# The commands main.py itself defines (build_parser), with or without subcommands.
OWN_COMMANDS = (
    "daemon",
    "capacity",
    "onboard",
    "resource-config",
    "pause",
    "resume",
    "offboard",
    "info",
    "peer",
    "chat",
    "network",
    "mode",
    "keys",
)


def build_parser(
    only: str | None = None, parser_class: type[Parser] | None = None
) -> argparse.ArgumentParser:
    """The whole command line; ``only``: just the parser of that one command (``job``), with
    only its module loaded: what running a command needs (``_main``). Help, completion and
    every usage error use the whole one."""

    def want(name: str) -> bool:
        return only is None or only == name

    common = Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object"
    )
    parser = (parser_class or Parser)(
        prog="nunet-tui",
        description="A decentralized compute market in one terminal program.",
        parents=[common],
    )
    parser.add_argument("--version", action=_Version)
    _add_app_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    if want("daemon"):
        daemon = sub.add_parser("daemon", help="run the node headless (for rigs reached over SSH)")
        daemon.add_argument(
            "--init",
            action="store_true",
            help="make the node if --home does not exist yet (a new identity); without it a "
            "missing --home is an error, not a new node",
        )
        daemon.add_argument(
            "--executor",
            action="append",
            choices=("docker", "process"),
            help="what runs jobs here (repeatable; config jobs.executors; process: trusted "
            "local networks only)",
        )

    if want("demo"):
        _add_demo_options(
            sub.add_parser("demo", help="a sandbox market on 127.0.0.1, then the app")
        )

    if want("capacity"):
        capacity = sub.add_parser("capacity", parents=[common], help="what this machine offers")
        views = capacity.add_mutually_exclusive_group()
        for view in ("full", "available", "onboarded"):
            views.add_argument(f"--{view}", dest="view", action="store_const", const=view)

    if want("onboard"):
        onboard = sub.add_parser("onboard", parents=[common], help="offer this machine's resources")
        onboard.add_argument("-m", "--memory", type=int, required=True, metavar="MB")
        onboard.add_argument("-c", "--cpu", type=int, required=True, metavar="MHZ")
        onboard.add_argument("-n", "--channel", default=api.DEFAULT_CHANNEL)
        onboard.add_argument("-a", "--address", required=True, help="Cardano wallet address")
        onboard.add_argument(
            "-l", "--local", action="store_true", help="discover peers on the local network (mDNS)"
        )
        onboard.add_argument(
            "-C",
            "--cardano",
            action="store_true",
            help="offer to host a Cardano node (needs 10,000 MB and 6,000 MHz)",
        )
        gpu_group = onboard.add_mutually_exclusive_group()
        gpu_group.add_argument(
            "--gpu",
            action="append",
            metavar="UUID",
            help="offer only this GPU (repeatable; default: every GPU found)",
        )
        gpu_group.add_argument("--no-gpu", action="store_true", help="offer no GPU")

    if want("resource-config"):
        config = sub.add_parser(
            "resource-config", parents=[common], help="change onboarded amounts"
        )
        config.add_argument("-m", "--memory", type=int, required=True, metavar="MB")
        config.add_argument("-c", "--cpu", type=int, required=True, metavar="MHZ")

    for name, text in (
        ("pause", "stop offering resources, keep the onboarding"),
        ("resume", "offer the onboarded resources again"),
        ("offboard", "remove the onboarding"),
        ("info", "machine, onboarding, peer id and ML readiness"),
    ):
        if want(name):
            sub.add_parser(name, parents=[common], help=text)

    if want("peer"):
        peer = sub.add_parser("peer", help="peers")
        peer_sub = peer.add_subparsers(dest="peer_command", metavar="PEER_COMMAND", required=True)
        peer_sub.add_parser("self", parents=[common], help="this node's peer id and addresses")
        peer_list = peer_sub.add_parser("list", parents=[common], help="peers seen on the channel")
        peer_list.add_argument("--dht", action="store_true", help="look the channel up in the DHT")

    if want("chat"):
        chat = sub.add_parser("chat", help="chat with peers")
        chat_sub = chat.add_subparsers(dest="chat_command", metavar="CHAT_COMMAND", required=True)
        chat_sub.add_parser("start", parents=[common], help="send a chat request").add_argument(
            "peer", metavar="PEER"
        )
        chat_sub.add_parser("list", parents=[common], help="open requests and conversations")
        chat_sub.add_parser("join", parents=[common], help="join a chat request").add_argument(
            "request_id", type=bounded_int(1, MAX_ROW_ID), metavar="ID"
        )
        chat_sub.add_parser("clear", parents=[common], help="remove open chat requests")
        send = chat_sub.add_parser("send", parents=[common], help="send a message")
        send.add_argument("peer", metavar="PEER")
        send.add_argument("text", metavar="TEXT")
        send.add_argument(
            "--no-queue",
            action="store_true",
            help="fail instead of queueing when the peer is unreachable",
        )
        history = chat_sub.add_parser("history", parents=[common], help="messages with a peer")
        history.add_argument("peer", metavar="PEER")
        history.add_argument("--limit", type=bounded_int(1, 100_000), default=500)

    if want("network"):
        network = sub.add_parser("network", help="the channel as a whole")
        network_sub = network.add_subparsers(
            dest="network_command", metavar="NETWORK_COMMAND", required=True
        )
        network_sub.add_parser("status", parents=[common], help="totals from heartbeats")
        network_sub.add_parser(
            "doctor",
            parents=[common],
            help="can peers reach this node? reachability, relays, connections, the fix",
        )

    added: set[str] = set()
    for name, module in COMMAND_MODULES.items():
        if want(name) and module not in added:
            importlib.import_module(f"nunet_tui.cli.{module}").add_parsers(sub, common)
            added.add(module)

    if want("mode"):
        mode = sub.add_parser("mode", parents=[common], help="show or set the TUI's mode")
        mode.add_argument("mode", nargs="?", choices=("provider", "consumer"))

    if want("keys"):
        sub.add_parser(
            "keys", parents=[common], help="the TUI's keys by id, for [keys] in config.toml"
        )

    if want("completion"):
        from nunet_tui.cli.completion import SHELLS

        completion = sub.add_parser(
            "completion", help="print a shell completion script (bash, zsh or fish)"
        )
        completion.add_argument("shell", choices=SHELLS)

    return parser


def _capacity(args: argparse.Namespace, client: EngineClient) -> api.Capacity:
    return client.call_blocking(api.GetCapacity(view=args.view or "full"))


def _onboard(args: argparse.Namespace, client: EngineClient) -> api.Onboarding:
    gpus: tuple[str, ...] | None = None
    if args.no_gpu:
        gpus = ()
    elif args.gpu:
        gpus = tuple(args.gpu)
    return client.call_blocking(
        api.OnboardRequest(
            memory_mb=args.memory,
            cpu_mhz=args.cpu,
            address=args.address,
            channel=args.channel,
            local_discovery=args.local,
            cardano_node=args.cardano,
            gpus=gpus,
        )
    )


def _mode(args: argparse.Namespace, client: EngineClient) -> Any:
    if args.mode:
        return client.call_blocking(api.SetMode(mode=args.mode))
    info: api.NodeInfo = client.call_blocking(api.GetInfo())
    return api.Done(message=info.mode or "not chosen yet")


def runners(only: str | None = None) -> dict[str, Runner]:
    """What runs each command, by its words ("job list"); ``only``: a command's first word,
    whose module alone is loaded (None: every module)."""
    table: dict[str, Runner] = {
        "capacity": _capacity,
        "onboard": _onboard,
        "resource-config": lambda a, c: c.call_blocking(
            api.ResourceConfig(memory_mb=a.memory, cpu_mhz=a.cpu)
        ),
        "pause": lambda a, c: c.call_blocking(api.Pause()),
        "resume": lambda a, c: c.call_blocking(api.Resume()),
        "offboard": lambda a, c: c.call_blocking(api.Offboard()),
        "info": lambda a, c: c.call_blocking(api.GetInfo()),
        "peer self": lambda a, c: c.call_blocking(api.GetPeerSelf()),
        "peer list": lambda a, c: c.call_blocking(api.ListPeers(dht=a.dht), timeout=20),
        "chat start": lambda a, c: c.call_blocking(api.ChatStart(peer_id=a.peer)),
        "chat list": lambda a, c: c.call_blocking(api.ChatList()),
        "chat join": lambda a, c: c.call_blocking(api.ChatJoin(request_id=a.request_id)),
        "chat clear": lambda a, c: c.call_blocking(api.ChatClear()),
        "chat send": lambda a, c: c.call_blocking(
            api.ChatSend(peer_id=a.peer, text=a.text, queue=not a.no_queue)
        ),
        "chat history": lambda a, c: c.call_blocking(
            api.ChatHistory(peer_id=a.peer, limit=a.limit)
        ),
        "network status": lambda a, c: c.call_blocking(api.GetNetworkStatus()),
        "network doctor": lambda a, c: c.call_blocking(api.NetworkDoctor()),
        "mode": _mode,
    }
    for name, module in COMMAND_MODULES.items():
        if only is None or only == name:
            # `log` has none: it runs without an engine (_run).
            table.update(getattr(importlib.import_module(f"nunet_tui.cli.{module}"), "RUNNERS", {}))
    return table


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `nunet-tui … | head`: the reader left, which is no error of ours; say nothing more.
        # Python's own flush at exit would fail again on the closed pipe: point it elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    app_args = _app_only(words) or _demo_only(words)
    if app_args is not None:
        return _run(app_args)
    from nunet_tui.cli import job_output

    parser, args = _parse(words)
    if args.command == "completion":
        from nunet_tui.cli.completion import script

        output.show(script(args.shell, parser).rstrip("\n"))
        return 0
    try:
        return _run(args)
    except job_output.UsageError as exc:
        where = f"{parser.prog} {exc.args[1]}" if len(exc.args) > 1 else parser.prog
        parser.exit(2, f"{where}: error: {safe(str(exc.args[0]))} (see {where} --help)\n")


def _run(args: argparse.Namespace) -> int:
    # Flags beat NUNET_* variables, which beat config.toml: the engine reads the environment.
    if args.listen:
        os.environ["NUNET_NETWORK_LISTEN"] = ",".join(args.listen)
    if args.bootstrap:
        os.environ["NUNET_NETWORK_BOOTSTRAP"] = ",".join(args.bootstrap)
    try:
        paths = Paths.for_home(args.home)
        if args.command is None:
            return _run_tui(paths, attach=args.attach)
        if args.command == "demo":
            from nunet_tui.cli.demo import run_demo

            return run_demo(tui=not args.no_tui, root=Path(args.root) if args.root else None)
        if args.command == "keys":  # no engine: the config's [keys] and the TUI's bindings
            from nunet_tui.cli.keys import run_keys

            return run_keys(paths, as_json=getattr(args, "json", False))
        if args.command == "daemon" and args.executor:
            os.environ["NUNET_JOBS_EXECUTORS"] = ",".join(dict.fromkeys(args.executor))
        if args.command == "log":  # no engine: it must work on a node that will not start
            from nunet_tui.cli import log_archive

            _check_home_exists(paths, args)

            return log_archive.run_log_archive(paths, args)
        if args.command == "daemon":
            from engine.daemon import run_daemon

            _check_home_exists(paths, args)
            run_daemon(paths)
            return 0
        sub_command = getattr(args, f"{args.command.replace('-', '_')}_command", None)
        key = f"{args.command} {sub_command}" if sub_command else args.command
        from nunet_tui.cli import job_output

        job_output.check_usage(key, args)  # before an engine is opened for nothing
        _check_home_exists(paths, args)
        return _run_command(runners(args.command)[key], args, paths, key)
    except EngineError as exc:
        output.show_error(exc.message)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # an OSError, but no failure: main() answers it
    except OSError as exc:
        # What the engine did not foresee (a disk full, a folder gone): still one line.
        output.show_error(f"{exc.filename or 'nunet-tui'}: {exc.strerror or exc}")
        return 1


# The commands that may make a node in a --home that does not exist yet (a new identity):
# anything else there is a mistyped path, which used to become a new node without a word.
CREATES_HOME = {"onboard", "wallet new", "wallet import"}


def _check_home_exists(paths: Paths, args: argparse.Namespace) -> None:
    """An EngineError when ``--home`` (or NUNET_HOME) names no folder and the command may not
    make one there. The per-user default home is made by any first command."""
    if paths.home is None or paths.home.exists():
        return
    sub_command = getattr(args, f"{args.command.replace('-', '_')}_command", None)
    key = f"{args.command} {sub_command}" if sub_command else args.command
    if key in CREATES_HOME or (args.command == "daemon" and args.init):
        return
    raise EngineError(
        "no_home",
        f"there is no node at {paths.home} (a mistyped --home?): `nunet-tui --home "
        f"{paths.home} onboard`, `wallet new` or `daemon --init` make one there",
    )


def _run_command(runner: Runner, args: argparse.Namespace, paths: Paths, key: str) -> int:
    from engine.config import load_settings
    from engine.connect import open_client
    from engine.logsetup import configure

    paths.ensure()  # a --home that is a file or unwritable: one line, before anything else
    # Only the log level: an embedded engine checks the addresses as it opens, and a daemon
    # has its own (multiaddr's checks are 40 ms of every command).
    configure(paths, load_settings(paths, addresses=False).log_level)
    client = open_client(paths, attach=args.attach, network=False)
    try:
        result = runner(args, client)
    finally:
        client.close()
    if result is None:  # the runner printed as it went (--watch, --fix)
        return 0
    from nunet_tui.cli import formatters

    if getattr(args, "json", False):
        output.show_json(formatters.to_json(result))
    else:
        output.show(formatters.to_text(result))
    return 0


def _run_tui(paths: Paths, attach: bool) -> int:
    from engine.config import load_settings
    from engine.connect import prepare_client
    from engine.deferred import DeferredClient
    from engine.logsetup import configure

    paths.ensure()
    # The log level now; a bad address in the config is the engine's error as it opens (on
    # the start screen, then here as one line and exit 1). [keys] goes to the app, which
    # checks its ids and keys (a bad one is a line in the app, not a refusal to start).
    settings = load_settings(paths, addresses=False)
    configure(paths, settings.log_level)
    # Which engine is decided now (a busy home or --attach without a daemon: one line, no
    # app); starting it waits for the app's first frame (DeferredClient.start).
    client = DeferredClient(
        prepare_client(paths, attach=attach, defer_network=True, reconnect=True)
    )
    try:
        from nunet_tui.app import NunetApp

        NunetApp(client=client, keys=settings.keys).run()
    finally:
        client.close()
    if (error := client.open_error) is not None:  # the app said so too; scripts see it here
        output.show_error(error.message)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
