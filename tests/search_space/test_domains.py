import copy
import math
import pickle

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FixedTrial

from search_space.domains import USE_DEFAULT, Categorical, FloatRange, IntRange, UseDefault


def test_use_default_is_stored_as_the_string_default_and_comes_back_as_the_sentinel():
    domain = Categorical((USE_DEFAULT, 512, 1024))
    assert domain.to_distribution() == CategoricalDistribution(("default", 512, 1024))
    assert domain.to_param(USE_DEFAULT) == "default"
    assert domain.suggest(FixedTrial({"interval": "default"}), "interval") is USE_DEFAULT
    assert domain.suggest(FixedTrial({"interval": 1024}), "interval") == 1024


def test_use_default_is_a_singleton_through_copy_and_pickle():
    assert UseDefault() is USE_DEFAULT
    assert copy.deepcopy(USE_DEFAULT) is USE_DEFAULT
    assert pickle.loads(pickle.dumps(USE_DEFAULT)) is USE_DEFAULT
    assert repr(USE_DEFAULT) == "default"


def test_categorical_refuses_the_reserved_string_repeats_and_non_plain_values():
    with pytest.raises(ValueError, match="reserved"):
        Categorical(("default", 1))
    with pytest.raises(ValueError, match="repeat"):
        Categorical((1, 2, 1))
    with pytest.raises(ValueError, match="not None, bool"):
        Categorical(((1, 2),))
    with pytest.raises(ValueError, match="at least one"):
        Categorical(())


def test_categorical_keeps_bools_apart_from_ints():
    switch = Categorical((0, 1))
    assert switch.contains(1) and not switch.contains(True)
    flag = Categorical((False, True))
    assert flag.contains(False) and not flag.contains(0)
    assert Categorical((0, False)).size == 2


def test_categorical_restricted_drops_choices_and_describes_itself():
    domain = Categorical((USE_DEFAULT, 0.25, 1.0))
    assert domain.restricted(lambda c: c is not USE_DEFAULT) == Categorical((0.25, 1.0))
    assert domain.describe() == "{default, 0.25, 1.0}"
    assert Categorical((False, True)).describe() == "{false, true}"


def test_int_range_suggests_with_keyword_step_and_log_through_optuna():
    stepped = IntRange(2, 8, step=2)
    assert stepped.to_distribution() == IntDistribution(2, 8, step=2)
    assert stepped.suggest(FixedTrial({"bits": 6}), "bits") == 6
    logged = IntRange(1, 64, log=True)
    assert logged.to_distribution() == IntDistribution(1, 64, log=True)
    assert logged.suggest(FixedTrial({"n": 16}), "n") == 16
    assert stepped.values() == (2, 4, 6, 8) and stepped.size == 4
    assert stepped.describe() == "2..8 step 2" and logged.describe() == "1..64 (log)"


def test_int_range_membership_is_strict_about_type_grid_and_bounds():
    domain = IntRange(2, 8, step=2)
    assert domain.contains(4)
    assert not domain.contains(5) and not domain.contains(10) and not domain.contains(4.0)
    assert not domain.contains(True)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"low": 5, "high": 1}, "exceeds"), ({"low": 1, "high": 8, "step": 2, "log": True}, "log"),
     ({"low": 1, "high": 8, "step": 0}, "step"), ({"low": 1, "high": 8, "step": 2}, "grid")],
)
def test_int_range_refuses_what_optuna_would_refuse(kwargs, message):
    with pytest.raises(ValueError, match=message):
        IntRange(**kwargs)


def test_float_range_on_a_step_grid_is_finite_and_contains_its_default():
    domain = FloatRange(0.1, 0.9, step=0.05)
    assert domain.size == 17 and domain.is_finite
    assert domain.contains(0.4) and not domain.contains(0.42) and not domain.contains(1.0)
    assert domain.to_distribution() == FloatDistribution(0.1, 0.9, step=0.05)
    assert domain.suggest(FixedTrial({"c": 0.4}), "c") == pytest.approx(0.4)
    assert domain.values()[6] == pytest.approx(0.4)


def test_continuous_float_range_has_infinite_size_and_no_value_list():
    domain = FloatRange(0.0, 1.0)
    assert math.isinf(domain.size) and not domain.is_finite
    with pytest.raises(ValueError, match="continuous"):
        domain.values()
    with pytest.raises(ValueError):
        FloatRange(0.0, 1.0, log=True)


def test_suggestions_in_a_real_study_stay_inside_each_domain():
    domains = {"a": Categorical((USE_DEFAULT, 1, 2)), "b": IntRange(2, 8), "c": FloatRange(0.1, 0.9, step=0.05)}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = []
    study.optimize(lambda t: seen.append({k: d.suggest(t, k) for k, d in domains.items()}) or 0.0, n_trials=20)
    assert all(domains[k].contains(v) for values in seen for k, v in values.items())
    assert any(values["a"] is USE_DEFAULT for values in seen)
