"""K-pair mixture designs of a study (mnmt.study.mixture_design): tags, weights, roles, errors,
and how `mnmt-study plan` lists them."""


import pytest

from mnmt.study import cli, mixture_design
from mnmt.study.spec import StudyError, StudySpec, expand, mixture_count

PAIRS = ("en-sv", "en-da", "en-es", "en-it", "en-fi")
CAPS = (("en-sv", 6000), ("en-da", 800), ("en-es", 6000), ("en-it", 800), ("en-fi", 2000))


def design(**fields) -> StudySpec:
    base = dict(name="k5", data_preset="tiny:en-{sv,da,es,it,fi}", pairs=PAIRS, data_caps=CAPS,
                sizes=("micro-2", "mini-1"), weights=(), single_pair_runs=True,
                uniform_mixture=True, temperatures=(1.0, 5.0, 100.0), unimax_epochs=(10.0,),
                dirichlet_mixtures=4, heldout_mixtures=3, train_steps=600, batch_size=48,
                examples_per_row=4.0)
    base.update(fields)
    return StudySpec.of(**base)


def by_tag(runs):
    out = {}
    for run in runs:
        out.setdefault(run.mixture, []).append(run)
    return out


def test_every_mixture_is_trained_at_every_size_and_seed_with_readable_ids():
    spec = design(seeds=(0, 1))
    runs = expand(spec)
    tags = by_tag(runs)
    expected = ([f"only-{p}" for p in PAIRS] + ["uniform", "T1", "T5", "T100", "unimax10"]
                + [f"dir{i}" for i in range(4)] + [f"hold{i}" for i in range(3)])
    assert list(tags) == expected
    assert all(len(group) == 2 * 2 for group in tags.values())  # sizes x seeds
    assert len({r.run_id for r in runs}) == len(runs)
    assert "micro-2_dir3_s0" in {r.run_id for r in runs}
    assert "mini-1_only-en-da_s1" in {r.run_id for r in runs}
    for run in runs:
        assert list(run.weights) == list(PAIRS)
        assert sum(run.weights.values()) == pytest.approx(1.0)


def test_single_pair_runs_are_one_hot_and_uniform_is_uniform():
    tags = by_tag(expand(design()))
    for pair in PAIRS:
        for run in tags[f"only-{pair}"]:
            assert run.weights == {p: float(p == pair) for p in PAIRS}
            assert run.trained_pairs == [pair]
    assert tags["uniform"][0].weights == pytest.approx(dict.fromkeys(PAIRS, 0.2))


def test_temperature_weights_follow_the_data_sizes():
    tags = by_tag(expand(design()))
    t1 = tags["T1"][0].weights
    assert t1 == pytest.approx({p: n / 15_600 for p, n in CAPS})
    t5 = tags["T5"][0].weights
    total = sum(n ** 0.2 for _, n in CAPS)
    assert t5 == pytest.approx({p: n ** 0.2 / total for p, n in CAPS})


def test_unimax_respects_the_epoch_cap_on_the_runs_budget():
    spec = design()
    budget = mixture_design.budget_examples(spec)
    assert budget == 600 * 48 * 4.0
    w = by_tag(expand(spec))["unimax10"][0].weights
    for pair, n in CAPS:
        assert w[pair] * budget <= 10 * n + 1e-6  # never more than 10 epochs of a pair
    assert w["en-da"] == pytest.approx(8000 / budget)  # capped
    assert w["en-sv"] == pytest.approx(w["en-es"]) and w["en-sv"] > w["en-fi"]  # uniform rest
    # more examples per row, a larger budget: the small pairs' share falls
    wider = by_tag(expand(design(examples_per_row=8.0)))["unimax10"][0].weights
    assert wider["en-da"] < w["en-da"]


def test_the_estimated_examples_per_row_packs_the_synthetic_sentences():
    spec = design(examples_per_row=0.0)
    per_row = mixture_design.estimated_examples_per_row(spec)
    assert 2.0 < per_row < 6.0  # ~6-word sentences in rows of 32 tokens
    assert mixture_design.budget_examples(spec) == pytest.approx(600 * 48 * per_row)
    real = spec.replace(tasks=tuple((p, f"t_{i}") for i, p in enumerate(PAIRS)),
                               vocabulary_path="v.model")
    assert mixture_design.estimated_examples_per_row(real) == 1.0


def test_dirichlet_mixtures_are_seeded_and_reproducible():
    a, b = expand(design()), expand(design())
    assert [r.weights for r in a] == [r.weights for r in b]
    dirs = [by_tag(a)[f"dir{i}"][0].weights for i in range(4)]
    other_seed = [by_tag(expand(design(design_seed=1)))[f"dir{i}"][0].weights for i in range(4)]
    assert dirs != other_seed
    assert len({tuple(w.values()) for w in dirs}) == 4
    # more design mixtures keep the first ones and never move the held-out ones
    more = by_tag(expand(design(dirichlet_mixtures=6)))
    assert [more[f"dir{i}"][0].weights for i in range(4)] == dirs
    assert [more[f"hold{i}"][0].weights for i in range(3)] == \
        [by_tag(a)[f"hold{i}"][0].weights for i in range(3)]


def test_heldout_mixtures_are_flagged_and_disjoint_from_the_design():
    runs = expand(design())
    held = [r for r in runs if r.heldout]
    assert {r.mixture for r in held} == {"hold0", "hold1", "hold2"}
    assert len(held) == 3 * 2
    fitted = {tuple(r.weights.values()) for r in runs if not r.heldout}
    assert not fitted & {tuple(r.weights.values()) for r in held}
    assert {mixture_design.role(r) for r in held} == {"held-out"}


def test_roles_of_design_baseline_and_heldout_runs():
    roles = {r.mixture: mixture_design.role(r) for r in expand(design(weights=((1, 1, 1, 1, 2),),
                                                                      oversampling=(5.0,)))}
    assert roles == {"": "design", **{f"only-{p}": "design" for p in PAIRS},
                     "uniform": "baseline", "T1": "baseline", "T5": "baseline",
                     "T100": "baseline", "os5": "baseline", "unimax10": "baseline",
                     **{f"dir{i}": "design" for i in range(4)},
                     **{f"hold{i}": "held-out" for i in range(3)}}


def test_a_design_alone_is_a_study_and_counts_its_mixtures():
    spec = design(temperatures=(), unimax_epochs=(), data_caps=(), heldout_mixtures=0)
    assert mixture_count(spec) == 5 + 1 + 4
    assert len(expand(spec)) == 2 * 10
    with pytest.raises(StudyError, match="StudySpec.weights: expected at least one mixture"):
        design(single_pair_runs=False, uniform_mixture=False, temperatures=(), unimax_epochs=(),
               dirichlet_mixtures=0, heldout_mixtures=0)


@pytest.mark.parametrize("fields, message", [
    ({"data_caps": CAPS[:4], "temperatures": ()}, r"StudySpec.unimax_epochs: UniMax needs StudySpec.data_caps for "
                              r"every pair .*caps given for \['en-da', 'en-es', 'en-it', 'en-sv'\]"),
    ({"temperatures": (), "unimax_epochs": (0.0,)}, "StudySpec.unimax_epochs: expected finite "
                                                    "positive epoch caps, got 0.0"),
    ({"unimax_epochs": (2.0, 2)}, "StudySpec.unimax_epochs: expected distinct epoch caps"),
    ({"unimax_epochs": ("1",)}, "StudySpec.unimax_epochs: expected a tuple of numbers"),
    ({"dirichlet_mixtures": -1}, "StudySpec.dirichlet_mixtures: expected a non-negative integer"),
    ({"heldout_mixtures": 1.5}, "StudySpec.heldout_mixtures: expected an integer"),
    ({"dirichlet_concentration": 0.0}, "StudySpec.dirichlet_concentration: expected a finite "
                                       "positive number, got 0.0"),
    ({"design_seed": -2}, "StudySpec.design_seed: expected a non-negative integer"),
    ({"single_pair_runs": 1}, "StudySpec.single_pair_runs: expected True or False"),
    ({"examples_per_row": -1.0}, "StudySpec.examples_per_row: expected 0 .estimate. or a "
                                 "positive number"),
    ({"pairs": ("en-sv",), "data_caps": (), "temperatures": (), "unimax_epochs": ()},
     "StudySpec.dirichlet_mixtures/heldout_mixtures: Dirichlet mixtures need at least two pairs"),
])
def test_bad_designs_name_the_field_and_what_was_expected(fields, message):
    with pytest.raises(StudyError, match=message):
        design(**fields)


def test_plan_lists_roles_weights_and_the_cost(capsys):
    assert cli.main(["plan", "--preset", "cpu-many-pairs"]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    spec = cli.load_spec(None, "cpu-many-pairs", [])
    assert len(lines) == len(expand(spec))
    fields = {line.split("\t")[0]: line.split("\t") for line in lines}
    only = fields["micro-2_only-en-sv_s0"]
    assert only[-1] == "role=design"
    assert only[2] == "en-sv=1.00 en-da=0.00 en-es=0.00 en-it=0.00 en-fi=0.00"
    contrast = fields["mini-1_w0.90-0.10-0.00-0.00-0.00_s0"]  # explicit weights: design
    assert contrast[-1] == "role=design"
    assert any(line.startswith("mini-1_uniform_s0\t") and line.endswith("role=baseline")
               for line in lines)
    held = [line for line in lines if "_hold" in line]
    assert held and all(line.endswith("held out (predicted, never fitted)\trole=held-out")
                        for line in held)
    runs = len(lines)
    assert f"# {runs} runs, {runs * spec.schedule.train_steps:,} steps; " in err
    assert "design" in err and "baseline" in err and "7 held-out" in err
    above = [line for line in lines if line.startswith("mini-2_")]  # a size above the design
    assert len(above) == 1 and "mini-2" not in spec.sizes and above[0].endswith("role=held-out")
