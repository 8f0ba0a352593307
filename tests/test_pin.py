"""`pin` is careful with the stack file: it changes only the pin keys, keeps the file's bytes, links,
mode and owner, and refuses (a ConfigError, the file untouched, no temporary file left) what it cannot do."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
from ruamel.yaml import YAML

import cli.stack_editor
import cli.safe_write
from allocation.errors import ConfigError
from allocation.planner import plan_fleet
from cli.pin import pin_stack_file, pinned_line
from cli.stackfile import load_fleet
from tests.support.pin_files import BGE_PINS, PINNED, QWEN_PINS, SEED, pin, plan_of, write
from tests.support.pipeline import plan_json_of
from tests.support.stacks import host, service

def services(path: Path) -> list[dict]:
    return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))["config"]["ascend-fleet:services"]


def test_the_seed_gets_every_pin_as_new_lines_after_each_service_in_the_order_of_pins_of(tmp_path):
    path = write(tmp_path, SEED)
    assert pin(path) == ["qwen", "bge"]
    assert path.read_text() == PINNED


def test_a_symlinked_stack_file_stays_a_link_and_its_target_gets_pinned(tmp_path):
    (tmp_path / "real").mkdir()
    target = write(tmp_path / "real", SEED)
    link = tmp_path / "Pulumi.t.yaml"
    link.symlink_to(target)
    assert pin(link) == ["qwen", "bge"]
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == PINNED
    # the lock file sits beside the file replaced (cli.safe_write.replace_if_unchanged), not beside the link
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".Pulumi.t.yaml.lock", "Pulumi.t.yaml", "Pulumi.t.yaml", "real"]
    assert (target.parent / ".Pulumi.t.yaml.lock").is_file()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o664])
def test_the_file_mode_is_kept(tmp_path, mode):
    path = write(tmp_path, SEED)
    path.chmod(mode)
    pin(path)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert path.read_text() == PINNED


def test_the_file_owner_and_group_are_kept(tmp_path):
    path = write(tmp_path, SEED)
    # Only root may give a file away; anyone may give it to another of their groups.
    owner = (4321, 8765) if os.geteuid() == 0 else (os.geteuid(), (os.getgroups() or [os.getegid()])[-1])
    os.chown(path, *owner)
    pin(path)
    assert (path.stat().st_uid, path.stat().st_gid) == owner
    assert path.read_text() == PINNED


def test_a_read_only_file_is_refused_with_an_error_naming_it_and_stays_unchanged(tmp_path):
    path = write(tmp_path, SEED)
    path.chmod(0o444)
    with pytest.raises(ConfigError, match="read-only") as err:
        pin(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert path.read_text() == SEED and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.t.yaml"]


def test_a_directory_the_user_may_not_write_to_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    path = write(tmp_path, SEED)
    plan = plan_of(path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: Path(p) != tmp_path and real_access(p, m, **kw))
    with pytest.raises(ConfigError, match="directory .* is not writable") as err:
        pin_stack_file(path, plan)
    assert str(path) in str(err.value)
    assert path.read_text() == SEED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.t.yaml"]


@pytest.mark.parametrize(
    ("where", "error", "reason"),
    [
        ("open", PermissionError(errno.EACCES, os.strerror(errno.EACCES)), "Permission denied"),
        ("open", OSError(errno.EROFS, os.strerror(errno.EROFS)), "Read-only file system"),
        ("replace", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "No space left on device"),
        ("replace", PermissionError(errno.EACCES, os.strerror(errno.EACCES)), "Permission denied"),
    ],
)
def test_a_failing_write_is_a_config_error_that_leaves_the_file_and_no_temporary_file(
    tmp_path, monkeypatch, where, error, reason
):
    path = write(tmp_path, SEED)
    plan = plan_of(path)

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(cli.safe_write.os, where, fail)
    with pytest.raises(ConfigError) as err:
        pin_stack_file(path, plan)
    assert str(path) in str(err.value) and reason in str(err.value) and "\n" not in str(err.value)
    assert path.read_text() == SEED
    # no temporary file; the lock file beside the stack file stays (removing it would race another writer)
    assert sorted(p.name for p in tmp_path.iterdir()) in (["Pulumi.t.yaml"], [".Pulumi.t.yaml.lock", "Pulumi.t.yaml"])


@pytest.mark.parametrize("config", ["config:\n", "config: null\n", "config: ~   # nothing yet\n"])
def test_an_empty_config_is_a_config_error_and_the_file_stays_untouched(tmp_path, config):
    plan = plan_of(write(tmp_path, SEED, "Pulumi.seed.yaml"))
    path = write(tmp_path, "# a stack without services\n" + config)
    with pytest.raises(ConfigError, match="no 'ascend-fleet:services' list to pin") as err:
        pin_stack_file(path, plan)
    assert str(path) in str(err.value)
    assert path.read_text() == "# a stack without services\n" + config


def test_crlf_line_endings_are_kept_on_every_line_old_and_new(tmp_path):
    path = write(tmp_path, SEED, newline="\r\n")
    pin(path)
    data = path.read_bytes()
    assert data == PINNED.replace("\n", "\r\n").encode()
    assert data.count(b"\n") == data.count(b"\r\n")


def test_a_utf8_byte_order_mark_is_kept(tmp_path):
    path = tmp_path / "Pulumi.t.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + SEED.encode())
    assert pin(path) == ["qwen", "bge"]
    assert path.read_bytes() == b"\xef\xbb\xbf" + PINNED.encode()


def test_number_spellings_elsewhere_in_the_file_are_kept_verbatim(tmp_path):
    numbers = "  other:hex: 0x1F\n  other:big: 1_000\n  other:signed: +12\n  other:octal: 0o17\n  other:exp: 1e3\n"
    path = write(tmp_path, SEED.replace("config:\n", "config:\n" + numbers))
    pin(path)
    assert path.read_text() == PINNED.replace("config:\n", "config:\n" + numbers)


FOUR_SPACES = """\
config:
    ascend-fleet:hosts:
        -   name: npu-a
            address: 192.0.2.10
    ascend-fleet:services:
        -   name: qwen
            model: /m/qwen
            tensorParallelSize: 4
            memoryFraction: 0.85
        -   name: bge
            model: /m/bge
            memoryFraction: 0.1
"""


def test_four_space_indentation_is_kept_and_new_keys_take_the_services_indentation(tmp_path):
    path = write(tmp_path, FOUR_SPACES)
    pin(path)
    pins = QWEN_PINS.replace("      ", "            ")
    assert path.read_text() == FOUR_SPACES.replace("0.85\n", "0.85\n" + pins) + BGE_PINS.replace("      ", "            ")


def test_a_long_flow_list_stays_on_one_line_verbatim(tmp_path):
    args = "      args: [--enable-prefix-caching, --trust-remote-code, --enforce-eager, --disable-log-requests, --tool-call-parser, hermes]\n"
    assert len(args) > 100
    path = write(tmp_path, SEED.replace("      tensorParallelSize: 4\n", args + "      tensorParallelSize: 4\n"))
    pin(path)
    assert path.read_text() == PINNED.replace("      tensorParallelSize: 4\n", args + "      tensorParallelSize: 4\n")


def test_a_comment_between_two_services_stays_between_them_and_pins_go_above_it(tmp_path):
    between = "\n    # bge: the embedding model, small enough to share a card\n"
    path = write(tmp_path, SEED.replace("    - name: bge\n", between + "    - name: bge\n"))
    pin(path)
    text = path.read_text()
    assert text == PINNED.replace("    - name: bge\n", between + "    - name: bge\n")
    assert text.index("vllmPort: 62016") < text.index("# bge: the embedding") < text.index("- name: bge")


def test_repinning_a_pinned_file_changes_no_byte_does_not_rewrite_it_and_returns_nothing(tmp_path):
    # Hand-written pins in a style pin would not choose: it must still leave them alone.
    styled = PINNED.replace("[0, 1, 2, 3]", "[0,1,2,3]    # the first quad").replace("host: npu-a", "host: 'npu-a'")
    path = write(tmp_path, styled)
    inode = path.stat().st_ino
    assert pin(path) == []
    assert path.read_text() == styled and path.stat().st_ino == inode


def test_stale_pins_are_replaced_in_place_keeping_their_comments_and_the_other_keys(tmp_path):
    plan = plan_of(write(tmp_path, SEED, "Pulumi.seed.yaml"))
    stale = PINNED.replace("      apiPort: 8000\n", "      apiPort: 0x1F41   # stale, but the comment stays\n")
    stale = stale.replace("      devices: [0]\n", "      devices:\n        - 7\n        - 6\n")
    stale = stale.replace("      vllmPort: 62000\n", "")
    path = write(tmp_path, stale)
    assert pin_stack_file(path, plan) == ["bge"]
    assert path.read_text() == PINNED.replace(
        "      apiPort: 8000\n", "      apiPort: 8000   # stale, but the comment stays\n"
    )


def test_flow_style_service_entries_get_their_pins_inside_the_braces(tmp_path):
    flow = SEED.replace(
        "    - name: bge\n      model: /m/bge\n      memoryFraction: 0.1\n",
        "    - {name: bge, model: /m/bge, memoryFraction: 0.1}   # on one line\n",
    )
    path = write(tmp_path, flow)
    assert pin(path) == ["qwen", "bge"]
    text = path.read_text()
    assert text.endswith(
        "    - {name: bge, model: /m/bge, memoryFraction: 0.1, host: npu-a, devices: [0], apiPort: 8000, "
        "hcclNpuSocketPortRange: [16666, 16681], hcclHostSocketPortRange: [60032, 60047], "
        "hcclIfBasePort: 61000, vllmPort: 62000}   # on one line\n"
    )
    assert services(path) == services(write(tmp_path, PINNED, "Pulumi.expected.yaml"))


def test_pin_refuses_to_write_text_that_would_change_anything_but_the_pins(tmp_path, monkeypatch):
    path = write(tmp_path, SEED)
    plan = plan_of(path)
    real_apply = cli.stack_editor._apply
    monkeypatch.setattr(cli.stack_editor, "_apply", lambda text, edits: real_apply(text, edits).replace("/m/bge", "/m/b"))
    with pytest.raises(ConfigError, match="without changing other content") as err:
        pin_stack_file(path, plan)
    assert str(path) in str(err.value)
    assert path.read_text() == SEED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.t.yaml"]


@pytest.mark.parametrize("stack", sorted(p.name.split(".")[1] for p in Path(__file__).parents[1].glob("Pulumi.*.yaml")))
def test_every_committed_stack_is_pinned_completely_so_adding_a_service_moves_no_running_one(tmp_path, stack):
    # A value the stack file leaves to the allocator can move when a service is added, and every
    # window is a container input: an unpinned committed stack would restart its neighbours.
    committed = Path(__file__).parents[1] / f"Pulumi.{stack}.yaml"
    copy = write(tmp_path, committed.read_text(encoding="utf-8"), committed.name)
    assert pin(copy) == [], f"{committed.name} leaves planned values unpinned: run `python -m allocation pin --stack {stack}`"
    assert copy.read_bytes() == committed.read_bytes()


def test_adding_a_small_tp1_service_to_prod_restarts_no_running_service():
    """Prod pinned completely: a newcomer fits around the pins, and no window of a running service moves,
    so no container is re-created. (Every card of npu-a is in use, so the newcomer shares one: the diff
    says which holder must stop for the card's switch to device-share mode, by the host's heldCards.)"""
    from tests.support.stacks import service, values_of
    from views.diff import diff_plans

    before = values_of("prod")
    after = {**before, "services": [*before["services"], service("e5-small", 1, 0.05)]}
    old, new = (plan_json_of(v, "prod") for v in (before, after))
    diff = diff_plans(old, new)
    assert [s.name for s in diff.changes()] == ["e5-small"] and diff.changes()[0].added
    assert diff.recreated() == []


def test_a_long_value_set_inside_a_flow_mapping_stays_in_flow_style(tmp_path):
    """YAML allows no block collection inside a flow one: a flow service's `replicaPins`, however long,
    is written in flow style (block style is for block entries only)."""
    path = tmp_path / "Pulumi.flow.yaml"
    path.write_text(
        "config:\n"
        "  ascend-fleet:hosts:\n"
        "    - {name: npu-c, address: 10.0.0.3}\n"
        "    - {name: npu-d, address: 10.0.0.4}\n"
        "  ascend-fleet:services:\n"
        "    - {name: chat, model: /models/chat, tensorParallelSize: 4, memoryFraction: 0.8, replicas: 2,\n"
        "       replicaPins: [{host: npu-c}, {host: npu-d}]}\n"
    )
    fleet, _ = load_fleet(config=str(path))
    assert pin_stack_file(path, plan_fleet(fleet)) == ["chat"]
    written = path.read_text()
    assert "replicaPins: [{host: npu-c, devices: [0, 1, 2, 3], apiPort: 8000" in written
    placed = [(ps.name, ps.assignment) for plan in (plan_fleet(fleet),) for _, ps in plan.services()]
    assert [(ps.name, ps.assignment) for _, ps in plan_fleet(load_fleet(config=str(path))[0]).services()] == placed


def test_pin_on_a_large_fleet_counts_the_pins_and_names_the_first_in_one_short_line(cli, tmp_path):
    hosts = [host(f"npu-{h:02d}", address=f"192.0.2.{h + 1}") for h in range(30)]
    services = [service(f"svc-{h:02d}-{c}", 1, 0.5, host=f"npu-{h:02d}") for h in range(30) for c in range(8)]
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text(json.dumps({"config": {"ascend-fleet:shards": {"size": 10}, "ascend-fleet:hosts": hosts,
                                           "ascend-fleet:services": services}}))  # fmt: skip
    result = cli("pin", "--config", str(path))
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert line.startswith(f"pinned {path}: 240 services and 30 hosts, among them svc-00-0, svc-00-1,")
    assert line.endswith(f"(git diff {path} shows every pin)") and len(line) < 200 + len(str(path)) * 2


def test_pin_names_each_pin_of_a_small_fleet():
    assert pinned_line(Path("P.yaml"), ["qwen", "bge", "host npu-a"]) == "pinned P.yaml: qwen, bge, host npu-a"
    assert pinned_line(Path("P.yaml"), []) == "pinned P.yaml: nothing new: every service was already pinned"
