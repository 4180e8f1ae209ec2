"""GPU health through nvidia-smi: the separate health query, its fallbacks on an older
nvidia-smi that refuses fields, the value forms ([N/A], [Not Supported], Yes/No, hex clock
reason masks), XIDs from the kernel log, and that nothing unread is ever judged ok."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.drivers import smi_nvidia
from gpupoolctl.agent.drivers.nvml import THROTTLE_BITS
from gpupoolctl.hw import health as rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
FMT = "--format=csv,noheader,nounits"

# HEALTH_FIELDS order: index, ecc uncorrected volatile, retired pages pending, remapped rows
# correctable / uncorrectable / pending / failure, clock event reasons, temperature.
H100_ROWS = (
    "0, 0, No, 0, 0, No, No, 0x0000000000000001, 33\n"  # idle, healthy
    "1, 0, No, 3, 1, Yes, No, 0x0000000000000000, 41\n"  # a row remap waits for a reset
    "2, 4, No, 0, 4, No, Yes, 0x0000000000000000, 40\n"  # ECC errors, remapping failed
    "3, 0, [N/A], 0, 0, No, No, 0x0000000000000060, 92\n"  # hot: thermal slowdowns
)
UNREADABLE_ROW = "0, [N/A], [N/A], [Not Supported], [Not Supported], [N/A], [N/A], [N/A], [N/A]\n"


def gpus_at(*buses: str) -> list[dict[str, Any]]:
    return [{"index": i, "pci_bus_id": bus} for i, bus in enumerate(buses)]


def health_of(text: str, records: list[Any] | None = None) -> list[dict[str, Any]]:
    gpus = gpus_at(*(f"0000:{0x18 + i:02x}:00.0" for i in range(text.count("\n"))))
    rows = smi_nvidia.parse_health(text, smi_nvidia.HEALTH_FIELDS)
    smi_nvidia.build_health(gpus, rows, records=records if records is not None else [])
    return [g["health"] for g in gpus]


# -- values ------------------------------------------------------------------------------------


def test_h100_rows_become_signals() -> None:
    first, pending, failed, hot = health_of(H100_ROWS)
    assert first["unknown"] == [] and first["lost"] is False
    assert first["ecc_uncorrected_volatile"] == 0 and first["retired_pages_pending"] is False
    assert first["remapped_rows"] == {
        "correctable": 0,
        "uncorrectable": 0,
        "pending": False,
        "failed": False,
    }
    assert first["throttle_reasons"] == ["gpu_idle"] and first["temperature_c"] == 33
    assert first["xids"] == []
    assert pending["remapped_rows"]["pending"] is True
    assert failed["remapped_rows"]["failed"] is True and failed["ecc_uncorrected_volatile"] == 4
    assert hot["throttle_reasons"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    # Ampere and later remap rows: an unreadable retired-pages field is no missing signal.
    assert hot["retired_pages_pending"] is None and hot["unknown"] == []
    verdicts = [rules.judge(h, "nvidia")["verdict"] for h in (first, pending, failed, hot)]
    assert verdicts == ["ok", "degraded", "failed", "degraded"]


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ("0x0000000000000000", []),
        ("0x0000000000000004", ["sw_power_cap"]),
        ("0x0000000000000008", ["hw_slowdown"]),
        ("0x00000000000000C0", ["hw_thermal_slowdown", "hw_power_brake_slowdown"]),
        ("0x0000000000000101", ["gpu_idle", "display_clock_setting"]),
        ("[N/A]", None),
        ("Not Active", None),
    ],
)
def test_clock_reason_masks_use_the_nvml_names(raw: str, names: list[str] | None) -> None:
    assert smi_nvidia.throttle_names(smi_nvidia._value(raw)) == names


def test_every_nvml_reason_bit_decodes() -> None:
    everything = f"0x{sum(bit for bit, _ in THROTTLE_BITS):016X}"
    assert smi_nvidia.throttle_names(everything) == [name for _, name in THROTTLE_BITS]


def test_na_and_not_supported_are_unknown_never_fine() -> None:
    gpus = gpus_at("0000:18:00.0")
    rows = smi_nvidia.parse_health(UNREADABLE_ROW, smi_nvidia.HEALTH_FIELDS)
    smi_nvidia.build_health(gpus, rows, records=None)  # and no kernel log
    health = gpus[0]["health"]
    assert set(health["unknown"]) == set(rules.SIGNALS["nvidia"])
    assert health["ecc_uncorrected_volatile"] is None and health["remapped_rows"] is None
    assert health["lost"] is None  # a row of N/A says nothing about the card
    assert all(name in " ".join(health["notes"]) for name in health["unknown"])
    judged = rules.judge(health, "nvidia")
    assert judged["verdict"] == "unknown"
    assert set(health["unknown"]) <= set(judged["unknown"])


def test_with_only_the_kernel_log_the_unread_signals_stay_listed() -> None:
    (health,) = health_of(UNREADABLE_ROW)
    judged = rules.judge(health, "nvidia")
    assert health["xids"] == []
    assert set(judged["unknown"]) == set(rules.SIGNALS["nvidia"]) - {"xids"}


def test_no_row_for_a_gpu_leaves_everything_unknown() -> None:
    gpus = gpus_at("0000:18:00.0", "0000:19:00.0")
    rows = smi_nvidia.parse_health("0, 0, No, 0, 0, No, No, 0x1, 30\n", smi_nvidia.HEALTH_FIELDS)
    smi_nvidia.build_health(gpus, rows, records=None)
    second = gpus[1]["health"]
    assert second["lost"] is None and "lost" in second["unknown"]
    assert rules.judge(second, "nvidia")["verdict"] == "unknown"
    assert "xids" in gpus[0]["health"]["unknown"]  # the kernel log was not readable


def test_a_failed_query_makes_every_signal_unknown() -> None:
    gpus = gpus_at("0000:18:00.0")
    smi_nvidia.build_health(gpus, None, why="nvidia-smi --query-gpu: timed out after 30s")
    health = gpus[0]["health"]
    assert set(health["unknown"]) == set(rules.SIGNALS["nvidia"])
    assert "timed out" in health["notes"][0]
    judged = rules.judge(health, "nvidia")
    assert judged["verdict"] == "unknown" and judged["action"] == "CHECK_BY_HAND"


def test_lost_gpu_message_is_not_a_row_and_marks_it_lost() -> None:
    out = "0, 0, No, 0, 0, No, No, 0x1, 30\n"
    err = (
        "Unable to determine the device handle for GPU1: 0000:19:00.0: GPU is lost. "
        "Reboot the system to recover this GPU\n"
    )
    rows = smi_nvidia.parse_health(out + err, smi_nvidia.HEALTH_FIELDS)
    assert sorted(rows) == [0]
    gpus = gpus_at("0000:18:00.0", "0000:19:00.0")
    lost = smi_nvidia.lost_buses(err)
    assert lost == {"0000:19:00.0"}
    smi_nvidia.build_health(gpus, rows, records=[], lost=lost)
    assert gpus[1]["health"]["lost"] is True and "lost" not in gpus[1]["health"]["unknown"]
    assert rules.judge(gpus[1]["health"], "nvidia")["verdict"] == "failed"


def test_xids_come_from_the_kernel_log() -> None:
    now = time.time()
    records = [
        (now - 60, "NVRM: Xid (PCI:0000:19:00): 79, pid=1234, GPU has fallen off the bus."),
        (now - 30, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"),
    ]
    healthy, fallen = health_of("0, 0, No, 0, 0, No, No, 0x1, 30\n" * 2, records)
    assert healthy["xids"] == [] and [e["xid"] for e in fallen["xids"]] == [79]
    assert rules.judge(healthy, "nvidia", now)["verdict"] == "ok"
    assert rules.judge(fallen, "nvidia", now)["verdict"] == "failed"


def test_parse_health_rejects_rows_of_the_wrong_width() -> None:
    with pytest.raises(smi_nvidia.SmiParseError, match="expected 9 comma-separated fields"):
        smi_nvidia.parse_health("0, 0, No\n", smi_nvidia.HEALTH_FIELDS)


# -- the query and its fallbacks ---------------------------------------------------------------


class OldSmi:
    """nvidia-smi that knows only `known` fields and refuses the first unknown one, as
    nvidia-smi does: 'Field "<name>" is not a valid field to query.', exit status 2."""

    def __init__(self, known: set[str], values: dict[str, str]) -> None:
        self.known = known
        self.values = values
        self.asked: list[list[str]] = []

    def __call__(self, args: list[str]) -> tuple[int | None, str, str]:
        fields = args[0].removeprefix("--query-gpu=").split(",")
        assert args[1] == FMT
        self.asked.append(fields)
        for field in fields:
            if field not in self.known:
                return 2, f'Field "{field}" is not a valid field to query.\n\n', ""
        return 0, ", ".join(self.values[f] for f in fields) + "\n", ""


VALUES = {
    "index": "0",
    "ecc.errors.uncorrected.volatile.total": "0",
    "retired_pages.pending": "No",
    "remapped_rows.correctable": "0",
    "remapped_rows.uncorrectable": "0",
    "remapped_rows.pending": "No",
    "remapped_rows.failure": "No",
    "clocks_event_reasons.active": "0x0000000000000004",
    "clocks_throttle_reasons.active": "0x0000000000000004",
    "temperature.gpu": "52",
}


def test_current_nvidia_smi_answers_the_first_query() -> None:
    smi = OldSmi(set(VALUES) - {"clocks_throttle_reasons.active"}, VALUES)
    fields, out, _ = smi_nvidia.query_health(smi)
    assert smi.asked == [list(smi_nvidia.HEALTH_FIELDS)] and fields == smi.asked[0]
    assert smi_nvidia.parse_health(out, fields)[0]["temperature.gpu"] == "52"


def test_older_nvidia_smi_gets_the_throttle_name() -> None:
    smi = OldSmi(set(VALUES) - {"clocks_event_reasons.active"}, VALUES)
    gpus = gpus_at("0000:18:00.0")
    smi_nvidia.read_health(gpus, smi, kernel_log=lambda: [])
    assert len(smi.asked) == 2 and "clocks_throttle_reasons.active" in smi.asked[1]
    health = gpus[0]["health"]
    assert health["throttle_reasons"] == ["sw_power_cap"] and health["unknown"] == []
    assert rules.judge(health, "nvidia")["verdict"] == "ok"


def test_pre_ampere_nvidia_smi_drops_the_remapped_row_fields() -> None:
    known = {f for f in VALUES if not f.startswith(("remapped_rows", "clocks_event"))}
    smi = OldSmi(known, VALUES)
    gpus = gpus_at("0000:18:00.0")
    smi_nvidia.read_health(gpus, smi, kernel_log=lambda: [])
    assert not any(f.startswith("remapped_rows") for f in smi.asked[-1])
    health = gpus[0]["health"]
    # Retired pages answer for the card's memory: remapped rows are not a missing signal.
    assert health["remapped_rows"] is None and health["retired_pages_pending"] is False
    assert health["unknown"] == [] and health["throttle_reasons"] == ["sw_power_cap"]


def test_a_dropped_field_is_unknown_with_the_reason() -> None:
    known = set(VALUES) - {"clocks_event_reasons.active", "clocks_throttle_reasons.active"}
    gpus = gpus_at("0000:18:00.0")
    smi_nvidia.read_health(gpus, OldSmi(known, VALUES), kernel_log=lambda: None)
    health = gpus[0]["health"]
    assert health["unknown"] == ["throttle_reasons", "xids"]
    assert "throttle_reasons: this nvidia-smi does not know the field" in health["notes"]


def test_a_refusal_naming_no_field_falls_back_to_the_minimal_set() -> None:
    asked: list[str] = []

    def smi(args: list[str]) -> tuple[int | None, str, str]:
        asked.append(args[0])
        if args[0] == "--query-gpu=" + ",".join(smi_nvidia.HEALTH_MINIMAL):
            return 0, "0, 0, No, 45\n", ""
        return 2, 'Field "" is not a valid field to query.\n', ""

    gpus = gpus_at("0000:18:00.0")
    smi_nvidia.read_health(gpus, smi, kernel_log=lambda: [])
    health = gpus[0]["health"]
    assert len(asked) == 2 and health["temperature_c"] == 45
    assert health["unknown"] == ["throttle_reasons"]


@pytest.mark.parametrize(
    "answer",
    [
        (None, "", "timed out after 30s"),
        (9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
        (0, "garbage\n", ""),
    ],
)
def test_a_failing_health_query_costs_health_only(answer: tuple[Any, str, str]) -> None:
    gpus = gpus_at("0000:18:00.0")
    smi_nvidia.read_health(gpus, lambda args: answer, kernel_log=lambda: None)
    health = gpus[0]["health"]
    assert set(health["unknown"]) == set(rules.SIGNALS["nvidia"])
    assert rules.judge(health, "nvidia")["verdict"] == "unknown"


def test_refusals_are_bounded() -> None:
    calls: list[list[str]] = []

    def stubborn(args: list[str]) -> tuple[int | None, str, str]:
        calls.append(args)
        return 2, 'Field "nonsense.field" is not a valid field to query.\n', ""

    assert isinstance(smi_nvidia.query_health(stubborn), str)
    assert len(calls) <= 2


# -- through a fake nvidia-smi binary ----------------------------------------------------------

FAKE_SMI = """#!{python}
import sys
FIXTURES = {fixtures!r}
args = sys.argv[1:]
if args[:2] == ["topo", "-m"]:
    sys.stdout.write(open(FIXTURES + "/l40s-4.topo.txt").read())
    sys.exit(0)
query = args[0]
if query.startswith("--query-compute-apps="):
    sys.exit(0)
fields = query.split("=", 1)[1].split(",")
if "uuid" in fields:
    sys.stdout.write(open(FIXTURES + "/l40s-4.query-gpu.csv").read())
    sys.exit(0)
# An R525-era nvidia-smi: the clock reasons by their old name only.
if "clocks_event_reasons.active" in fields:
    print('Field "clocks_event_reasons.active" is not a valid field to query.')
    print()
    sys.exit(2)
values = {{
    "ecc.errors.uncorrected.volatile.total": "0",
    "retired_pages.pending": "[N/A]",
    "remapped_rows.correctable": "0",
    "remapped_rows.uncorrectable": "0",
    "remapped_rows.pending": "No",
    "remapped_rows.failure": "No",
    "clocks_throttle_reasons.active": "0x0000000000000004",
    "temperature.gpu": "[Not Supported]",
}}
for index in range(4):
    print(", ".join(str(index) if f == "index" else values[f] for f in fields))
"""


def test_driver_with_a_fake_nvidia_smi_that_refuses_a_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text(FAKE_SMI.format(python=sys.executable, fixtures=str(FIXTURES)))
    script.chmod(0o755)
    monkeypatch.setattr(smi_nvidia.shutil, "which", lambda name: str(script))
    now = time.time()
    log = [(now - 5, "NVRM: Xid (PCI:0000:ce:00): 48, pid=77, DBE (double bit error)")]
    driver = smi_nvidia.open_driver(kernel_log=lambda: log)
    gpus = driver.gpus()
    assert len(gpus) == 4 and driver.version() == "570.133.20"  # the facts are intact
    healths = [g["health"] for g in gpus]
    assert all(h["throttle_reasons"] == ["sw_power_cap"] for h in healths)
    assert all(h["remapped_rows"]["pending"] is False for h in healths)
    assert all(h["unknown"] == ["temperature_c"] for h in healths)  # [Not Supported]
    assert [e["xid"] for e in healths[2]["xids"]] == [48]
    verdicts = [rules.judge(h, "nvidia", now)["verdict"] for h in healths]
    assert verdicts == ["ok", "ok", "failed", "ok"]
    assert all("temperature_c" in rules.judge(h, "nvidia", now)["unknown"] for h in healths)


def test_status_runner_never_raises(tmp_path: Path) -> None:
    status, out, err = smi_nvidia.status_runner(str(tmp_path / "absent"))(["-L"])
    assert status is None and out == "" and err
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    status, _, err = smi_nvidia.status_runner(str(slow), budget_s=0.2)(["-L"])
    assert status is None and "timed out" in err
