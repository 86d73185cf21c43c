"""RESULTS.md and its Pareto plot: a view of what results.db holds, regenerated after every trial.

Every number here is read back from the stores (Optuna's trials, ar_* and eval_* tables); the
report computes nothing that is not stored, except ratios of stored numbers.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import optuna

from autoresearch.db import ResultsDB
from autoresearch.finalists import feasible_front, load_champion
from autoresearch.objectives import DECODE_RATE, PREFILL_RATE
from autoresearch.plan import RunPlan
from autoresearch.provenance import gpu_uuid
from eval import EvalStore
from eval.store import to_jsonable

__all__ = ["changed_knobs", "write_report"]


def changed_knobs(config: dict, baseline: dict) -> str:
    """The config's differences from the baseline, e.g. `max_chunk_size=4096, EXL3_INT8_GEMV=0`."""
    diffs = [f"{k}={v}" for k, v in sorted(config.get("args", {}).items()) if baseline.get("args", {}).get(k) != v]
    diffs += [f"{k}={v}" for k, v in sorted(config.get("env", {}).items()) if baseline.get("env", {}).get(k) != v]
    diffs += [f"{k}=(exllamav3 default)" for k in sorted(baseline.get("env", {})) if k not in config.get("env", {})]
    return ", ".join(diffs) or "(baseline)"


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _ratio(x: float | None, base: float | None) -> str:
    return "-" if not x or not base else f"{x / base:.3f}x"


def _plot(study: optuna.Study, baseline, path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:  # the report stays complete without its picture
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.values and min(t.values) > 0]
    if not done:
        return False
    feasible = [t for t in done if all(c <= 0 for c in t.user_attrs.get("constraints", [1]))]
    front = {t.number for t in feasible_front(study)}
    fig, ax = plt.subplots(figsize=(7, 5), dpi=100)
    rejected = [t for t in done if t not in feasible]
    if rejected:
        ax.scatter([t.values[1] for t in rejected], [t.values[0] for t in rejected], marker="x", color="tab:red",
                   label="rejected by the gate")
    ax.scatter([t.values[1] for t in feasible if t.number not in front],
               [t.values[0] for t in feasible if t.number not in front], color="tab:gray", label="feasible")
    on_front = sorted((t for t in feasible if t.number in front), key=lambda t: t.values[1])
    ax.plot([t.values[1] for t in on_front], [t.values[0] for t in on_front], "o-", color="tab:blue",
            label="gated Pareto front")
    if baseline is not None:
        ax.scatter([baseline.values[1]], [baseline.values[0]], marker="*", s=200, color="gold", edgecolor="black",
                   zorder=5, label="baseline")
    for t in done:
        ax.annotate(str(t.number), (t.values[1], t.values[0]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("prefill tok/s (server-timed)")
    ax.set_ylabel("decode tok/s (client-timed)")
    ax.set_title(study.study_name, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _stopped(trials: list[optuna.trial.FrozenTrial], baseline) -> list[str]:
    """Why the study stopped, when its baseline could not be measured or its task suite cannot be the
    reference (and no baseline completed since)."""
    if baseline is not None:
        return []
    failed = [t for t in trials if t.user_attrs.get("role") == "baseline"
              and t.user_attrs.get("outcome") in ("unmeasured", "baseline_tasks_invalid")]
    if not failed:
        return []
    reasons = "; ".join(failed[-1].user_attrs.get("reasons", []))
    return ["", f"**The study stopped: {reasons}.** Nothing was judged: every candidate is measured against the "
            "baseline. Fix the cause and run the same command again to continue."]


def _gpu_of(details: dict) -> str:
    """A short name of the physical GPU a measurement ran on (UUIDs tell apart cards of one model)."""
    name = ((details.get("gpu") or {}).get("details") or {}).get("name", "cpu")
    uuid = gpu_uuid(details)
    return f"{name} …{uuid[-6:]}" if uuid else str(name)


def _measured_table(study: optuna.Study, db: ResultsDB, plan: RunPlan, base_cfg: dict) -> list[str]:
    """Every trial's first-launch bench medians and fidelity, whatever the gate made of it."""
    gpus = {row["trial"]: _gpu_of(row["details"]) for row in db.provenance(study=plan.study_name)}
    rows = []
    keys: list[str] = []
    for t in study.get_trials(deepcopy=False):
        bench = [r["payload"] for r in db.measurements(study=plan.study_name, kind="bench", trial=t.number)
                 if r["launch"] == 0]
        if not bench:
            continue
        headline = bench[-1].get("headline", {})
        keys += [k for k in headline if k not in keys and ("_client@" in k or k.startswith("prefill_tok_per_s_server"))]
        fid = [r["payload"]["metrics"] for r in db.measurements(study=plan.study_name, kind="fidelity", trial=t.number)]
        outcome = "baseline" if t.user_attrs.get("role") == "baseline" else t.user_attrs.get("outcome", t.state.name)
        rows.append((t, outcome, headline, fid[-1] if fid else None))
    if not rows:
        return []
    keys.sort(key=lambda k: (not k.startswith("decode"), k))
    lines = ["", "## Every measured configuration (first launch; medians, tok/s)", ""]
    if len(set(gpus.values())) > 1:
        lines += [f"**These trials ran on {len(set(gpus.values()))} different GPUs** (a resumed study moved): "
                  "compare speeds within one GPU only. Finalists are always re-measured together on one.", ""]
    lines += ["| trial | outcome | " + " | ".join(k.replace("_tok_per_s", "") for k in keys)
              + " | KL mean | top-1 (w/o near-ties) | GPU | changes |",
              "|---:|---|" + "---:|" * len(keys) + "---:|---:|---|---|"]
    for t, outcome, headline, fid in rows:
        kl, top1 = "-", "-"
        if fid:
            decisive = fid.get("top1_decisive_agreement")
            kl = f"{fid['kl_mean']:.2e}"
            top1 = f"{fid['top1_agreement']:.4f}" + (f" ({decisive:.4f})" if decisive is not None else "")
        speeds = " | ".join(_fmt(headline.get(k), 1) for k in keys)
        lines.append(f"| {t.number} | {outcome} | {speeds} | {kl} | {top1} | {gpus.get(t.number, '-')} | "
                     f"`{changed_knobs(t.user_attrs.get('config', {}), base_cfg)}` |")
    return lines


def _gate_line(plan: RunPlan, store: EvalStore) -> str:
    """The fidelity gate as its stored decisions applied it (the plan's, before any decision exists)."""
    rows = [r for r in store.decision_rows(plan.model.manifest_hash)
            if str(r["candidate_label"]).startswith(plan.study_name + ":")]
    f = rows[-1]["policy"]["fidelity"] if rows else to_jsonable(plan.gate_policy)["fidelity"]
    return (f"Fidelity gate: each statistic within {f['noise_factor']:g} x max(noise floor, minimum floor); minimum "
            f"floors KL mean {f['min_floor_kl_mean']:g}, KL p99 {f['min_floor_kl_p99']:g}, top-1 disagreement "
            f"{f['min_floor_top1_disagreement']:g} (near-tie flips not counted).")


def _task_tier_lines(plan: RunPlan, store: EvalStore) -> list[str]:
    """How the task tier decided: its design and power, then every candidate's paired test per taskset."""
    policy = plan.gate_policy.tasks
    if not policy.judge:
        return ["", "**The task tier ran as a smoke check (`--task-tier smoke`): every run was recorded and nothing "
                "was judged; candidates were gated on fidelity alone.**"]
    lines = ["", f"Task tier: per taskset, a sequential paired test on the tasks the baseline and the candidate "
             f"disagree on, walked in the baseline's run order and stopped as soon as it is clear. It is sized to "
             f"detect a {policy.min_drop:.0%} accuracy drop with power {policy.power:.0%} when "
             f"{policy.planned_discordance:.0%} of tasks flip; a lossless change is rejected at most "
             f"{policy.alpha:.0%} of the time over the whole suite (shared equally among its tasksets). Partial "
             f"credit counts as a wrong answer (correct = reward {policy.full_credit:g}). Power below is exact for "
             "the paired tasks at the planned share of flips, and again at the share the run showed.", "",
             "| trial | taskset | decision | tasks used / paired | lost | gained | power | flips seen | power at flips seen |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    rows = [r for r in store.decision_rows(plan.model.manifest_hash)
            if str(r["candidate_label"]).startswith(plan.study_name + ":")]
    for row in rows:
        trial = str(row["candidate_label"]).split(":")[-2].removeprefix("trial-")
        for v in row["evidence"].get("tasksets") or []:
            if "decision" not in v:  # decided before the sequential test existed
                continue
            seen = v.get("observed_discordance")
            lines.append(f"| {trial} | {v['name']} | {v['decision']} | {v['tasks_used']} / {v['paired_tasks']} | "
                         f"{v['lost']} | {v['gained']} | {v['power']:.0%} | {_fmt(seen, 3)} | "
                         f"{'-' if v.get('observed_power') is None else format(v['observed_power'], '.0%')} |")
    return lines


def _finalists_table(finals: list[dict]) -> list[str]:
    if not finals:
        return []
    lines = ["", "## Finalists, re-measured in fresh launches", ""]
    last = [f["verdict"] for f in finals if f["round"] == finals[-1]["round"]]
    if who := next((v for v in last if v.get("worker")), None):  # one worker confirms, on one GPU
        gpu = who.get("gpu") or {}
        lines += [f"Round {finals[-1]['round']} confirmed by worker `{who['worker']}` on "
                  + (f"{gpu.get('name')} (`{gpu.get('uuid')}`)" if gpu else "no GPU (CPU engine)")
                  + (f", CUDA_VISIBLE_DEVICES={who['cuda_visible_devices']}" if who.get("cuda_visible_devices") else "")
                  + ".", ""]
    lines += ["| round | trial | decode tok/s | prefill tok/s | speed-up | decision |", "|---:|---:|---:|---:|---:|---|"]
    for f in finals:
        v = f["verdict"]
        if v.get("baseline") is True:  # rows of older versions hold the baseline's numbers under this key
            decision = "baseline"
        else:
            decision = "confirmed faster" if v.get("qualified") else v.get("reason", "not confirmed faster")
        lines.append(f"| {f['round']} | {f['trial']} | {_fmt(f['decode_tok_per_s'], 2)} | "
                     f"{_fmt(f['prefill_tok_per_s'])} | {_speedup(v)} | {decision} |")
    return lines


def _speedup(verdict: dict) -> str:
    if verdict.get("baseline") is True:
        return "1.000x"
    return f"{verdict['speedup']:.3f}x" if verdict.get("speedup") is not None else "-"


def _tasksets(db: ResultsDB, store: EvalStore, plan: RunPlan, trial: int | None) -> dict[str, object]:
    if trial is None:
        return {}
    rows = db.measurements(study=plan.study_name, kind="suite", trial=trial)
    if not rows:
        return {}
    result = store.load_suite_result(rows[-1]["payload"]["suite_run_id"])
    return {t.name: t for t in result.tasksets}


def write_report(plan: RunPlan, study: optuna.Study, db: ResultsDB, store: EvalStore) -> Path:
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    baseline = next((t for t in complete if t.user_attrs.get("role") == "baseline"), None)
    base_cfg = baseline.user_attrs["config"] if baseline else {}
    base_vals = tuple(baseline.values) if baseline else (None, None)
    champion = load_champion(study)
    lines = [
        f"# Results: {plan.study_name}",
        "",
        f"Generated {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} from `{plan.storage_label}` "
        f"(`optuna-dashboard {plan.storage_label}` shows the same study). Model **{plan.model.name}** "
        f"(`{plan.model.source}`, manifest `{plan.model.manifest_hash[:16]}`), engine **{plan.engine}**, "
        f"suite **{plan.suite}**. Objectives: decode tok/s timed by the client and prefill tok/s timed by the "
        "server (uncached tokens over the engine's prefill time), each a geometric mean over bench's points; "
        "a configuration missing any point is unmeasured, never averaged over the rest.",
        *(["", "**The task tier did not run (`--suite none`): candidates were gated on fidelity alone.**"]
          if plan.suite == "none" else []),
        *_stopped(trials, baseline),
        "",
        _gate_line(plan, store),
        "",
        "## Champion",
        "",
    ]
    if champion:
        who = "the baseline" if champion["is_baseline"] else f"trial {champion['trial']}"
        lines += [
            f"**{who}**: decode {_fmt(champion['decode_tok_per_s'], 2)} tok/s, prefill "
            f"{_fmt(champion['prefill_tok_per_s'])} tok/s, speed-up {champion['speedup']:.3f}x "
            f"({champion['reason']}).",
            "",
            f"Changes from the baseline: `{changed_knobs(champion['config'], base_cfg)}`",
            "",
            "Serve it: `python -m autoresearch export --study " + plan.study_name + " --out champion.json`, then "
            f"`python -m serving --model {plan.model.path} --config champion.json`.",
        ]
    else:
        lines.append("Not decided yet: the finalists are confirmed in fresh launches when the loop ends.")
    lines += ["", "## Gated Pareto front (search measurements, one launch each)", "",
              "| trial | decode tok/s | prefill tok/s | decode vs baseline | prefill vs baseline | changes |",
              "|---:|---:|---:|---:|---:|---|"]
    for t in sorted(feasible_front(study), key=lambda t: -t.values[0]):
        lines.append(f"| {t.number} | {_fmt(t.values[0], 2)} | {_fmt(t.values[1])} | {_ratio(t.values[0], base_vals[0])} "
                     f"| {_ratio(t.values[1], base_vals[1])} | `{changed_knobs(t.user_attrs.get('config', {}), base_cfg)}` |")
    lines += _finalists_table(db.finalists(study=plan.study_name))
    lines += ["", "## Baseline", ""]
    if baseline:
        evidence = study.user_attrs.get("baseline_evidence", {})
        lines += [f"Trial {baseline.number}: decode {_fmt(base_vals[0], 2)} tok/s, prefill {_fmt(base_vals[1])} tok/s; "
                  f"config digest `{baseline.user_attrs.get('config_digest', '')[:12]}`.", ""]
        if evidence.get("speed_floor"):
            floor = ", ".join(f"{k} {v:.1%}" for k, v in sorted(evidence["speed_floor"].items())
                              if k.startswith((DECODE_RATE, PREFILL_RATE)))
            lines.append(f"Speed noise floor (two fresh launches): {floor}.")
        fid = [r["payload"] for r in db.measurements(study=plan.study_name, kind="fidelity", trial=baseline.number)]
        if fid:
            m = fid[-1]["metrics"]
            decisive = m.get("top1_decisive_agreement")
            lines.append(f"Fidelity noise floor: KL mean {m['kl_mean']:.2e}, KL p99 {m['kl_p99']:.2e}, top-1 agreement "
                         f"{m['top1_agreement']:.4f}" + (f" ({decisive:.4f} not counting near-ties)" if decisive is not None
                                                          else "") + f" over {m['n_positions']} positions.")
        lines += ["", "```json", json.dumps(base_cfg, indent=1, sort_keys=True), "```"]
    else:
        lines.append("Not measured yet.")
    lines += ["", "## Rejected and stopped candidates", "", "| trial | outcome | reasons | changes |", "|---:|---|---|---|"]
    for t in trials:
        outcome = t.user_attrs.get("outcome")
        if t.user_attrs.get("role") == "baseline" or outcome in (None, "passed"):
            continue
        reasons = "; ".join(t.user_attrs.get("reasons", []))[:300].replace("|", "/")
        lines.append(f"| {t.number} | {outcome} | {reasons} | `{changed_knobs(t.user_attrs.get('config', {}), base_cfg)}` |")
    lines += _measured_table(study, db, plan, base_cfg)
    lines += ["", "## Per-taskset results (never merged)", ""]
    if plan.suite == "none":
        lines.append("Not run: `--suite none` gates on fidelity alone.")
    else:
        base_sets = _tasksets(db, store, plan, baseline.number if baseline else None)
        champ_trial = champion["trial"] if champion and not champion["is_baseline"] else None
        champ_sets = _tasksets(db, store, plan, champ_trial)
        lines += ["| taskset | run | tasks | rollouts | accuracy (full credit) | reward | operational failures | "
                  "truncations | output tok/s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for label, sets in (("baseline", base_sets), (f"champion (trial {champ_trial})", champ_sets)):
            for name, r in sets.items():
                lines.append(f"| {name} | {label} | {r.tasks} | {r.rollouts} | {_fmt(r.accuracy, 3)} | "
                             f"{_fmt(r.reward_mean, 3)} | {r.failures} | {r.truncations} | {_fmt(r.output_tok_per_s)} |")
        lines += _task_tier_lines(plan, store)
    lines += ["", "## Provenance", ""]
    prov = db.provenance(study=plan.study_name)
    if prov:
        last = prov[-1]
        details = last["details"]
        info = details.get("server_info") or {}
        gpu = details.get("gpu") or {}
        lines += [
            f"- model manifest: `{plan.model.manifest_hash}` ({plan.model.manifest_path})",
            f"- engine: {last['engine']} {last['engine_version'] or ''}; torch {last['torch_version'] or '-'}; "
            f"CUDA {info.get('cuda_version', '-')}",
            f"- GPU: {last['gpu_name'] or 'none'}; driver {last['gpu_driver'] or '-'}; "
            f"power limit {((gpu.get('details') or {}).get('power_limit_w')) or '-'} W",
            f"- host: {details.get('host', {}).get('platform', '-')}; project commit "
            f"{(details.get('project') or {}).get('commit') or '-'}"
            f"{' (dirty)' if (details.get('project') or {}).get('dirty') else ''}",
        ]
    if plan.vram_bytes:
        lines.append(f"- VRAM budget: {plan.vram_bytes / 2**30:.1f} GiB{' (emulated on the server)' if plan.emulate_vram else ''}")
    plot = plan.results_md.with_name(plan.results_md.stem + "-pareto.png")
    if _plot(study, baseline, plot):
        lines += ["", f"![Pareto front]({plot.name})"]
    plan.results_md.parent.mkdir(parents=True, exist_ok=True)
    tmp = plan.results_md.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(plan.results_md)  # atomic: a killed loop never leaves half a report
    return plan.results_md
