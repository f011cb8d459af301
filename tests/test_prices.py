"""What a job costs: the prices trainspec carries (exactly the snapshot's rows, exactly what the
generator writes), a team's own region and prices (which win; every mistake located), each target
priced as it bills (spot as spot, a Ray head regular, a team cluster never a bill per job, no time
limit no maximum), `skus` showing prices, and the cost table that opens plan --git's comment, on
real git histories: the same every run, never cut, a too-long one keeping the largest changes."""

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, edit, git, spec_repo, ts

from trainspec.registry.build import build
from trainspec.review.cost import (TABLE_LIMIT, CostRow, Summary, TargetCost, Part, target_cost,
                                   totals)
from trainspec.schema import prices

CSV = Path(os.environ.get("TRAINSPEC_PRICES_CSV") or REPO.parent / "shared/reference/azure-gpu-prices/vms-gpu.csv")
needs_csv = pytest.mark.skipif(not CSV.is_file(), reason=f"the snapshot's CSV is not here ({CSV}; set "
                                                         "TRAINSPEC_PRICES_CSV): it is not in the repository")
H100 = "Standard_ND96isr_H100_v5"


def snapshot_rows():
    with CSV.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def generator():
    spec = importlib.util.spec_from_file_location("gen_prices", REPO / "docs" / "gen_prices.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the carried prices ------------------------------------------------------------------------------

@needs_csv
def test_the_package_file_is_exactly_what_the_generator_writes_from_the_snapshot():
    assert (REPO / "trainspec" / "schema" / "prices.json").read_text(encoding="utf-8") == generator().generate(CSV)


@needs_csv
def test_every_carried_price_is_the_snapshots_row_and_every_caveat_is_handled():
    carried = prices.snapshot()["prices"]
    known = set(json.loads((REPO / "trainspec" / "schema" / "skus.json").read_text())["skus"])
    seen = 0
    for row in snapshot_rows():
        size, region = row["InstanceType"], row["Region"]
        rates = carried.get(size, {}).get(region, {})
        if size not in known:  # only what the catalog knows travels
            assert size not in carried
            continue
        pay = float(row["Price"]) if row["Price"] else 0.0
        spot = float(row["SpotPrice"]) if row["SpotPrice"] else 0.0
        assert rates.get("pay_as_you_go") == (pay if pay > 0 else None), (size, region)
        # a spot price equal to the full price (every H100 row) is not a spot rate: left out
        assert rates.get("spot") == (spot if spot > 0 and spot != pay else None), (size, region)
        seen += 1
    assert seen > 40
    h100 = carried[H100]
    assert h100["eastus"] == {"pay_as_you_go": 98.32} and set(h100) == {"eastus", "eastus2", "westus"}
    assert not any(k.endswith("_Promo") for k in carried)
    about = prices.snapshot()
    assert about["commit"] == "098741e70562f65d7af1cceb81e33b284f742604" and about["date"] == "unknown, after 2023-12-06"
    # the GPU count comes from the catalog, never the snapshot's 12
    assert "AcceleratorCount" not in json.dumps(about["prices"])


def test_the_generator_says_where_the_csv_is_when_it_is_missing(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "gen_prices.py"), str(tmp_path / "none.csv"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "none.csv: no such file" in proc.stderr


@pytest.mark.parametrize("command", [["compile", "specs/slurm-ddp.yaml", "-o"], ["check", "specs/slurm-ddp.yaml", "--out"]])
def test_compile_and_check_never_load_the_prices(command, tmp_path):
    """Prices are for plan and skus: compile and check stay as fast as they were."""
    code = ("import sys\nimport trainspec.cli as cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('loaded' if 'trainspec.schema.prices' in sys.modules else 'not loaded')")
    proc = subprocess.run([sys.executable, "-c", code, *command, str(tmp_path / "build")], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.strip().splitlines()[-1] == "not loaded", (proc.stdout, proc.stderr)


# --- a team's region and prices ----------------------------------------------------------------------

@pytest.fixture
def work(tmp_path):
    """A repository of a few specs (no team file yet)."""
    root = tmp_path / "work"
    (root / "specs").mkdir(parents=True)
    (root / ".git").mkdir()
    for name in ("mnist-lightning.yaml", "mnist-lightning-mpi.yaml", "ray-lightning.yaml", "slurm-ddp.yaml",
                 "tf-multiworker.yaml"):
        shutil.copy(REPO / "specs" / name, root / "specs" / name)
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def cost(root, spec, target):
    outcome = build(str(root / "specs" / spec), root / "build")
    assert outcome.ok, [d.render() for d in outcome.diagnostics]
    return target_cost(outcome, target)


def test_the_default_region_is_named_and_the_team_region_and_prices_win(work):
    found = cost(work, "mnist-lightning.yaml", "azureml")
    assert found.region.said() == "eastus (the default region)" and found.per_hour == pytest.approx(2 * 98.32)
    assert "in eastus (the default region)" in found.text()
    (work / "trainspec-skus.yaml").write_text("region: westus\n")
    found = cost(work, "mnist-lightning.yaml", "azureml")
    assert found.region.name == "westus" and found.per_hour == pytest.approx(2 * 127.816)
    assert found.parts[0].rate.origin == "snapshot"
    (work / "trainspec-skus.yaml").write_text(f"region: westus\nprices:\n  {H100}: {{pay_as_you_go: 60}}\n")
    found = cost(work, "mnist-lightning.yaml", "azureml")
    assert found.per_hour == 120 and found.parts[0].rate.origin == "team" and "(team price)" in found.text()
    # skus says the same, and where each figure comes from
    listed = json.loads(ts("skus", "--format", "json", cwd=work, check=True).stdout)
    row = next(r for r in listed["skus"] if r["name"] == H100)
    assert row["prices"] == {"pay_as_you_go": 60.0, "spot": None, "pay_as_you_go_from": "team", "spot_from": None}
    assert listed["region"] == "westus" and listed["region_from"] == "region: in trainspec-skus.yaml"
    text = ts("skus", "--gpu", "H100", cwd=work, check=True).stdout
    assert "$60.00 (team)" in text and "prices: USD per hour for one VM in westus (region: in trainspec-skus.yaml)" in text


def test_every_mistake_in_the_team_prices_is_located(work):
    (work / "trainspec-skus.yaml").write_text(
        "region: West US\n"                                       # 1
        "prices:\n"                                               # 2
        "  Standard_ND96isr_H100_v9: {pay_as_you_go: 60}\n"       # 3
        "  Standard_ND96asr_v4: {pay_as_you_go: -1, spot: cheap}\n"  # 4
        "  Standard_NC24ads_A100_v4: {reserved: 2.0}\n"           # 5
        "  Standard_NC4as_T4_v3: 0.5\n")                          # 6
    proc = ts("skus", cwd=work)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    for line in ("trainspec-skus.yaml:1:9: error: region: 'West US' is not spelt like an Azure region",
                 "trainspec-skus.yaml:3:29: error: prices.Standard_ND96isr_H100_v9: 'Standard_ND96isr_H100_v9' is not a "
                 "VM size trainspec knows (hint: did you mean Standard_ND96isr_H100_v5",
                 "trainspec-skus.yaml:4:40: error: prices.Standard_ND96asr_v4.pay_as_you_go: expected a price in USD per "
                 "hour for one VM, a number from 0 to 1,000, not '-1'",
                 "trainspec-skus.yaml:4:50: error: prices.Standard_ND96asr_v4.spot: expected a price",
                 "trainspec-skus.yaml:5:40: error: prices.Standard_NC24ads_A100_v4.reserved: unknown field 'reserved'",
                 "trainspec-skus.yaml:6:25: error: prices.Standard_NC4as_T4_v3: expected the size's rates"):
        assert line in proc.stderr, (line, proc.stderr)
    # a spec under that file is an error too, where it is
    proc = ts("validate", "specs/mnist-lightning.yaml", cwd=work)
    assert proc.returncode == 1 and "trainspec-skus.yaml:1:9: error: region" in proc.stderr


def test_a_price_that_is_not_a_finite_sensible_number_is_a_located_error_and_never_inf(work):
    """1e308 (whose total overflows to inf), .inf, .nan, a negative price or one past any VM's:
    each is an error at its own line and column, the field and the range named, in every command
    that reads the catalog; no output says `inf` or `nan`."""
    (work / "trainspec-skus.yaml").write_text(
        "prices:\n"                                                   # 1
        f"  {H100}: {{pay_as_you_go: 1e308}}\n"                       # 2
        "  Standard_ND96asr_v4: {pay_as_you_go: .inf, spot: .nan}\n"  # 3
        "  Standard_NC24ads_A100_v4: {spot: -0.5}\n"                  # 4
        "  Standard_NC4as_T4_v3: {pay_as_you_go: 1001}\n")            # 5
    wanted = [f"trainspec-skus.yaml:2:45: error: prices.{H100}.pay_as_you_go: expected a price in USD per hour for "
              "one VM, a number from 0 to 1,000, not '1e+308' (hint: pay_as_you_go: 70.0",
              "trainspec-skus.yaml:3:40: error: prices.Standard_ND96asr_v4.pay_as_you_go: expected a price in USD per "
              "hour for one VM, a number from 0 to 1,000 (hint:",
              "trainspec-skus.yaml:3:52: error: prices.Standard_ND96asr_v4.spot: expected a price",
              "trainspec-skus.yaml:4:36: error: prices.Standard_NC24ads_A100_v4.spot: expected a price in USD per hour "
              "for one VM, a number from 0 to 1,000, not '-0.5'",
              "trainspec-skus.yaml:5:41: error: prices.Standard_NC4as_T4_v3.pay_as_you_go: expected a price in USD per "
              "hour for one VM, a number from 0 to 1,000, not '1001'"]
    for command in (["skus"], ["validate", "specs/mnist-lightning.yaml"], ["plan", "specs/mnist-lightning.yaml"],
                    ["check", "specs/mnist-lightning.yaml", "--out", "build/"]):
        proc = ts(*command, cwd=work)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (command, proc.stderr)
        for line in wanted:
            assert line in proc.stderr, (command, line, proc.stderr)
        said = (proc.stdout + proc.stderr).lower()
        assert "inf" not in said.replace("infiniband", "") and "nan" not in said, (command, said)
    assert prices.usd(float("inf")) == "an amount too large to say" and prices.usd(1e308 * 10) != "$inf"


# --- each target priced as it bills ------------------------------------------------------------------

def test_spot_is_priced_at_the_spot_rate_and_a_size_without_one_says_so(work):
    found = cost(work, "mnist-lightning-mpi.yaml", "azureml")  # resources.spot, serverless: job_tier spot
    assert [p.spot for p in found.parts] == [True] and found.per_hour == pytest.approx(2 * 3.6047)
    assert "at $3.6047 spot (snapshot)" in found.text()
    edit(work / "specs" / "mnist-lightning-mpi.yaml", "Standard_ND96amsr_A100_v4", H100)
    found = cost(work, "mnist-lightning-mpi.yaml", "azureml")  # the snapshot has no real H100 spot rate
    assert found.per_hour is None and found.most is None
    assert found.text().startswith(f"16 GPUs; no price in eastus (the default region): 2 x {H100}: no spot price")
    assert "$0" not in found.text()


def test_ray_is_priced_in_its_own_region_with_the_head_regular_and_the_workers_spot(work):
    spec = work / "specs" / "ray-lightning.yaml"
    edit(spec, "  nodes: 2\n", "  nodes: 3\n  spot: true\n")
    edit(spec, "location: eastus", "location: westus2")
    (work / "trainspec-skus.yaml").write_text("region: centralus\n")  # Ray's own location wins
    found = cost(work, "ray-lightning.yaml", "ray")
    assert found.region.said() == "westus2 (targets.ray.location)"
    head, workers = found.parts
    assert (head.role, head.count, head.spot) == ("head", 1, False) and (workers.count, workers.spot) == (2, True)
    rows = {r["Region"]: r for r in snapshot_rows() if r["InstanceType"] == "Standard_ND96asr_v4"} if CSV.is_file() else {}
    if rows:
        assert found.per_hour == pytest.approx(float(rows["westus2"]["Price"]) + 2 * float(rows["westus2"]["SpotPrice"]))
    assert found.seconds is None and found.most is None and found.text().endswith("no maximum: no time limit")
    # a CPU head: regular, at its own size (which the snapshot has no price for: said, never $0)
    edit(spec, "    head: worker\n", "    head: cpu\n    keep_cluster: true\n")
    found = cost(work, "ray-lightning.yaml", "ray")
    assert found.parts[0].role == "CPU head" and found.parts[0].size == "Standard_D8s_v3" and found.parts[0].rate is None
    assert found.per_hour is None and "CPU head 1 x Standard_D8s_v3: no pay-as-you-go price" in found.text()
    (work / "trainspec-skus.yaml").write_text("prices:\n  Standard_D8s_v3: {pay_as_you_go: 0.4}\n")
    found = cost(work, "ray-lightning.yaml", "ray")
    assert found.per_hour is not None and "no maximum: the cluster is kept after the job" in found.text()


def test_a_team_cluster_is_never_said_to_bill_the_job(work):
    found = cost(work, "slurm-ddp.yaml", "slurm")
    assert not found.billed and found.most is None and found.per_hour == pytest.approx(2 * 98.32)
    assert found.text().startswith("16 GPUs; not billed per job: slurm runs on the team's own nodes (the partition's "
                                   "nodes, paid whether or not a job runs); the 2 node(s) it holds cost $196.64/h")
    assert "up to" not in found.text()


def test_no_time_limit_is_no_maximum_never_a_number(work):
    edit(work / "specs" / "mnist-lightning.yaml", "    timeout: 2d\n", "")
    found = cost(work, "mnist-lightning.yaml", "azureml")
    assert found.seconds is None and found.most is None and found.text().endswith("no maximum: no time limit")


def test_plan_has_a_cost_line_per_target_in_text_markdown_and_json(work):
    text = ts("plan", "specs/slurm-ddp.yaml", "specs/mnist-lightning.yaml", cwd=work, check=True).stdout
    assert "\n  cost: 16 GPUs; $196.64/h (2 x Standard_ND96isr_H100_v5 at $98.32 pay-as-you-go (snapshot)" in text
    assert "\n  cost: 16 GPUs; not billed per job: slurm runs on the team's own nodes" in text
    md = ts("plan", "specs/mnist-lightning.yaml", "--format", "markdown", cwd=work, check=True).stdout
    assert "\n- cost: 16 GPUs; \\$196.64/h (2 x Standard\\_ND96isr\\_H100\\_v5 at \\$98.32 pay\\-as\\-you\\-go" in md \
        or "\n- cost: 16 GPUs; \\$196.64/h" in md
    assert all(md[i - 1] == "\\" for i in range(len(md)) if md[i] == "$" and not inside_code(md, i))
    data = json.loads(ts("plan", "specs/mnist-lightning.yaml", "--format", "json", cwd=work, check=True).stdout)
    cost_ = data["jobs"][0]["targets"][0]["cost"]
    assert cost_["usd_per_hour"] == pytest.approx(196.64) and cost_["max_usd"] == pytest.approx(196.64 * 48)
    assert cost_["billed_per_job"] is True and cost_["region"] == "eastus"


def inside_code(md, index):
    """Whether ``md[index]`` is inside a code span of its line (backtick runs balanced before it)."""
    line_start = md.rfind("\n", 0, index) + 1
    return md[line_start:index].count("`") % 2 == 1


# --- the cost table of plan --git, on real histories ----------------------------------------------------

@pytest.fixture
def repo(tmp_path):
    return spec_repo(tmp_path)


def plan_md(repo, base="main"):
    return ts("plan", "--git", base, "--format", "markdown", cwd=repo, check=True).stdout


def table_rows(md):
    """The cost table's rows (cells as rendered text) from markdown-it."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable(["table"]).parse(md)
    rows, row, cell = [], None, None
    for token in tokens:
        if token.type == "tr_open":
            row = []
        elif token.type in ("td_open", "th_open"):
            cell = []
        elif token.type == "inline" and cell is not None:
            cell.append("".join(c.content for c in token.children or [] if c.type in ("text", "code_inline")))
        elif token.type in ("td_close", "th_close"):
            row.append("".join(cell))
            cell = None
        elif token.type == "tr_close":
            rows.append(row)
        elif token.type == "table_close":
            break
    return rows


def test_world_16_to_32_on_h100_says_the_gpus_the_price_and_the_most_before_and_after(repo):
    git("checkout", "-q", "-b", "bigger", cwd=repo)
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 4\n")
    git("commit", "-q", "-am", "world 16 -> 32", cwd=repo)
    md = plan_md(repo)
    rate = 98.32  # the snapshot's eastus row of Standard_ND96isr_H100_v5 (checked against the CSV above)
    if CSV.is_file():
        rate = float(next(r["Price"] for r in snapshot_rows()
                          if r["InstanceType"] == H100 and r["Region"] == "eastus"))
    x, y, z = 2 * rate, 4 * rate * 48, 2 * rate * 48  # +2 VMs per hour; 4 and 2 VMs for the 2d time limit
    rows = table_rows(md)
    assert rows[0] == ["job", "target", "GPUs", "price per hour", "the most it can cost"]
    job = next(r for r in rows if r[0] == "mnist-lightning")
    assert job[1] == "azureml" and job[2] == "16 → 32 (+16)"
    assert job[3].startswith(f"${x:,.2f}/h → ${2 * x:,.2f}/h (+${x:,.2f}/h)")
    assert job[4] == f"up to ${y:,.2f} at the time limit (48h), was up to ${z:,.2f} at the time limit (48h)"
    assert md.index("| job | target |") < md.index("\n## mnist-lightning")  # it opens the comment
    assert "date unknown, after 2023-12-06" in md and "commit 098741e70562" in md  # the footnote
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable(["table"]).render(md)
    assert "$" in html and all(md[i - 1] == "\\" for i, c in enumerate(md) if c == "$" and not inside_code(md, i))
    assert ts("plan", "--git", "main", "--format", "markdown", cwd=repo, check=True).stdout == md  # every run alike
    data = json.loads(ts("plan", "--git", "main", "--format", "json", cwd=repo, check=True).stdout)
    row = next(r for r in data["cost"]["table"] if r["job"] == "mnist-lightning")
    assert row["after"]["max_usd"] == pytest.approx(y) and row["before"]["max_usd"] == pytest.approx(z)


def test_a_change_of_the_team_prices_shows_though_no_job_file_changes(repo):
    """The table prices both sides with the base's catalog: a better rate in the pull request
    changes no row; the paragraph above the table says the catalog changes, the field, and what
    the job would cost with each catalog."""
    (repo / "trainspec-skus.yaml").write_text(f"prices:\n  {H100}: {{pay_as_you_go: 90}}\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "our rate", cwd=repo)
    git("checkout", "-q", "-b", "cheaper", cwd=repo)
    edit(repo / "trainspec-skus.yaml", "pay_as_you_go: 90", "pay_as_you_go: 70")
    git("commit", "-q", "-am", "a better rate", cwd=repo)
    md = plan_md(repo)
    assert md.startswith("# trainspec plan: 0 jobs changed since main\n\n**Merging this launches no job**\n\n"
                         "**Cost: GPUs of all jobs: 26 → 26; "
                         "no cost changes**\n\n**Team catalog: `trainspec-skus.yaml` changes, for 3 jobs; the table "
                         "prices both sides with the base's catalog")
    assert table_rows(md) == []  # priced with one catalog, nothing changes
    said = rendered_text(md)
    assert f"prices.{H100}.pay_as_you_go 90.0 → 70.0" in said
    assert "mnist-lightning (azureml): with the base's catalog $180.00/h, up to $8,640.00 at the time limit (48h); " \
           "with this pull request's $140.00/h, up to $6,720.00 at the time limit (48h)" in said
    # review --git prints the same comment, opening with the same summary (review/change.py
    # prices both sides with the base's team file for plan, diff and review alike)
    review = ts("review", "--git", "main", cwd=repo, check=True).stdout
    assert review.startswith(md.rstrip("\n") + "\n\n")
    data = json.loads(ts("plan", "--git", "main", "--format", "json", cwd=repo, check=True).stdout)
    catalog, = data["cost"]["catalogs"]
    assert catalog["changes"] == [{"field": f"prices.{H100}.pay_as_you_go", "before": 90.0, "after": 70.0}]
    assert [r["job"] for r in catalog["prices"]] == ["mnist-lightning"]


def rendered_text(md):
    """The comment as a reader sees it: every inline token's text, one line per block."""
    from markdown_it import MarkdownIt

    lines = []
    for token in MarkdownIt("commonmark").enable(["table"]).parse(md):
        if token.type == "inline":
            lines.append("".join(c.content for c in token.children or [] if c.type in ("text", "code_inline")))
    return "\n".join(lines)


@pytest.mark.parametrize("where", ["trainspec-skus.yaml", "specs/trainspec-skus.yaml"])
def test_a_pull_request_cannot_make_its_own_change_cheap_with_the_catalog(repo, where):
    """2 → 32 H100 nodes, and in the same pull request a price of $0.01/h for the size: in the
    catalog the base has (edited), or in a new one nearer the specs that shadows it. The table
    says what the 32 nodes cost at the base's price; the paragraph above it says the catalog
    changes, and what the job would cost with it."""
    (repo / "trainspec-skus.yaml").write_text("region: eastus\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "our region", cwd=repo)
    git("checkout", "-q", "-b", "bigger", cwd=repo)
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 32\n")
    (repo / where).write_text(f"region: eastus\nprices: {{{H100}: {{pay_as_you_go: 0.01}}}}\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "bigger, and cheap", cwd=repo)
    review = ts("review", "--git", "main", cwd=repo, check=True).stdout
    summary = review.split("\n## ")[0]
    job = next(r for r in table_rows(summary) if r[0] == "mnist-lightning")
    assert job[2] == "16 → 256 (+240)" and job[3].startswith("$196.64/h → $3,146.24/h (+$2,949.60/h)"), job
    assert "$0.32/h" not in job[3]
    said = rendered_text(summary)
    which = ("`trainspec-skus.yaml` changes, for 3 jobs" if where == "trainspec-skus.yaml" else
             "`specs/trainspec-skus.yaml` is new for 3 jobs and shadows `trainspec-skus.yaml`")
    assert f"Team catalog: {which.replace('`', '')}; the table prices both sides with the base's catalog" in said
    assert f"prices.{H100}.pay_as_you_go - → 0.01" in said
    assert "mnist-lightning (azureml): with the base's catalog $3,146.24/h, up to $151,019.52 at the time limit " \
           "(48h); with this pull request's $0.32/h, up to $15.36 at the time limit (48h)" in said
    assert summary.index("Team catalog") < summary.index("| job |")  # above the table, in the summary never cut
    # the plan of the job says the base's price too
    plan = json.loads(ts("plan", "--git", "main", "--format", "json", cwd=repo, check=True).stdout)
    cost_, = [t["cost"] for j in plan["jobs"] if j["name"] == "mnist-lightning" for t in j["targets"]]
    assert cost_["usd_per_hour"] == pytest.approx(3146.24)


def test_a_spec_taken_from_the_working_tree_at_the_base_is_priced_by_the_bases_team_file(
        repo, monkeypatch, capsys):
    """A spec whose every input (its team file included) is the same at the base is not compiled
    there again (revision.Unchanged), yet the base side's catalog is read in the base's tree,
    never the working tree's file."""
    from trainspec.cli import main
    from trainspec.review import change as change_module, revision

    (repo / "trainspec-skus.yaml").write_text(f"prices:\n  {H100}: {{pay_as_you_go: 90}}\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "our rate", cwd=repo)
    git("checkout", "-q", "-b", "edit", cwd=repo)
    edit(repo / "specs" / "single-node.yaml", "name: single-node", "name: single-node-2")
    git("commit", "-q", "-am", "rename a job", cwd=repo)
    built, priced = [], []
    real_build, real_summarise = revision.build, change_module.summarise

    def counting(file, *args, **kwargs):
        built.append((os.getcwd(), Path(file).as_posix()))
        return real_build(file, *args, **kwargs)

    def recording(old_jobs, new_jobs, diffs, catalogs=({}, {}), own=None):
        priced.append((catalogs, own))
        return real_summarise(old_jobs, new_jobs, diffs, catalogs, own)

    monkeypatch.setattr(revision, "build", counting)
    monkeypatch.setattr(change_module, "summarise", recording)
    monkeypatch.chdir(repo)
    with pytest.raises(SystemExit) as done:
        main(["review", "--git", "main", "specs/"])
    assert done.value.code == 0, capsys.readouterr().err
    at_base = [f for cwd, f in built if Path(cwd) != repo]
    assert "specs/mnist-lightning.yaml" not in at_base and "specs/single-node.yaml" in at_base, built
    ((old, new), own), = priced
    root = Path(os.path.realpath(repo))
    assert Path(os.path.realpath(own["mnist-lightning"].head.team_file)) == root / "trainspec-skus.yaml"
    for side in (old, new):  # both sides are priced with the base's file
        base_file = side["mnist-lightning"].team_file
        assert base_file.name == "trainspec-skus.yaml" and root not in Path(os.path.realpath(base_file)).parents
    assert old["mnist-lightning"].prices == new["mnist-lightning"].prices == own["mnist-lightning"].head.prices


def test_a_team_region_without_the_price_leaves_the_totals_saying_so_never_zero(repo):
    """A team region where H100 has no price (westus2 in the snapshot): the job says `no price`
    and the totals count it as one without a price, never `up to $0.00` alone."""
    (repo / "trainspec-skus.yaml").write_text("region: westus2\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "our region", cwd=repo)
    git("checkout", "-q", "-b", "west", cwd=repo)
    edit(repo / "specs" / "mnist-lightning.yaml", "  nodes: 2\n", "  nodes: 4\n")
    git("commit", "-q", "-am", "more nodes", cwd=repo)
    by = {(r[0], r[1]): r for r in table_rows(plan_md(repo))[1:]}
    assert by[("mnist-lightning", "azureml")][3].startswith(f"no price ({H100} in westus2)")
    price = by[("all jobs", "azureml")][3]  # no difference of totals over different priced jobs
    assert price.endswith(" + 1 job(s) without a price") and "(-" not in price, price
    most = by[("all jobs", "azureml")][4]
    assert most.split(", was ")[0].endswith(" + 1 job(s) without a price"), most


def test_added_and_removed_jobs_are_in_the_table_with_the_totals(repo):
    git("rm", "-q", "specs/single-node.yaml", cwd=repo)
    shutil.copy(REPO / "specs" / "slurm-ddp.yaml", repo / "specs" / "slurm-ddp.yaml")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "one out, one in", cwd=repo)
    rows = table_rows(plan_md(repo, "HEAD~1"))
    by = {(r[0], r[1]): r for r in rows[1:]}
    assert by[("single-node", "azureml")][2] == "2 → none (removed)"
    assert by[("slurm-ddp", "slurm")][2] == "16 (new)"
    assert by[("slurm-ddp", "slurm")][4] == "not billed per job (new)"
    assert by[("all jobs", "azureml")][0] == "all jobs" and ("all jobs", "slurm") in by


def test_the_table_survives_an_overflowing_comment(repo):
    """A change whose plan and diff alone overflow the comment: the table is whole, first."""
    git("checkout", "-q", "-b", "wide", cwd=repo)
    spec = repo / "specs" / "mnist-lightning.yaml"
    for n in range(30):
        shutil.copy(spec, repo / "specs" / f"copy-{n:02d}.yaml")
        edit(repo / "specs" / f"copy-{n:02d}.yaml", "name: mnist-lightning", f"name: copy-{n:02d}")
        edit(repo / "specs" / f"copy-{n:02d}.yaml", "NCCL_DEBUG: WARN", "NCCL_DEBUG: WARN\n  BIG: " + "x" * 3000)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "thirty big jobs", cwd=repo)
    md = plan_md(repo)
    rows = table_rows(md)
    assert sorted(r[0] for r in rows if r[0].startswith("copy-")) == [f"copy-{n:02d}" for n in range(30)]
    assert len(md) <= 60_000 and "Cut to fit one comment" in md


def fake(gpus, per_hour, hours=24.0):
    rate = prices.Rate(per_hour, "snapshot")
    return TargetCost("azureml", gpus, (Part(1, H100, False, rate),), prices.Region("eastus", "the default region"),
                      int(hours * 3600), "")  # billed per job


def test_a_table_too_long_for_one_comment_keeps_the_totals_and_the_largest_changes():
    table = [CostRow(f"job-{n:04d}", "azureml", fake(8, 10.0 + n), fake(16, 20.0 + 3 * n)) for n in range(600)]
    totals_row = CostRow(None, "azureml", totals([r.before for r in table]), totals([r.after for r in table]))
    summary = Summary([], (4800, 9600), [totals_row, *table], "Prices: a note.")
    md = summary.render("markdown", "trainspec plan --git main --format text")
    rows = table_rows(md)
    assert len(md) < TABLE_LIMIT + 1_000
    assert rows[1][0] == "all jobs"  # the totals stay
    shown = [r[0] for r in rows[2:]]
    assert shown[0] == "job-0599" and shown == sorted(shown, reverse=True)  # the largest changes first
    assert 100 < len(shown) < 600
    assert f"*{600 - len(shown)} smaller change(s) not shown (largest first above); every row: " \
           "`trainspec plan --git main --format text`*" in md
    text = summary.render("text", "")
    assert text.count("\n  job-") == 600  # text is never cut
    assert summary.render("markdown", "x") == summary.render("markdown", "x")
