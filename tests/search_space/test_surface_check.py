"""The start-up check refuses a catalog that names what the installed exllamav3 lacks."""

import dataclasses
import shutil

import pytest

from search_space.catalog import EXL3_KNOBS, TRANSFORMERS_KNOBS
from search_space.errors import CatalogMismatch
from search_space.knobs import EnvVar, ExlArg, SpaceContext
from search_space.model_info import read_model_info
from search_space.space import build_space
from search_space.surface_check import check_catalog
from serving.exl3_surface import installed_surface, read_surface


def _replace(name, **changes):
    return tuple(dataclasses.replace(k, **changes) if k.name == name else k for k in EXL3_KNOBS)


def test_the_shipped_catalog_matches_the_installed_exllamav3():
    check_catalog(EXL3_KNOBS)
    check_catalog(TRANSFORMERS_KNOBS)  # no exllamav3 knobs: nothing to look up


def test_a_catalog_entry_naming_a_missing_argument_stops_start_up_naming_the_knob():
    wrong = _replace("max_chunk_size", applied_as=ExlArg("max_chunk_size", (("Generator", "max_chunk_tokens"),)))
    with pytest.raises(CatalogMismatch) as exc:
        check_catalog(wrong)
    message = str(exc.value)
    assert "knob 'max_chunk_size'" in message and "'max_chunk_tokens'" in message and "Generator()" in message


def test_a_catalog_entry_naming_a_missing_variable_stops_start_up_naming_the_knob():
    wrong = _replace("EXL3_GRAPHS", applied_as=EnvVar("EXL3_GRAPHS_OFF", "1"))
    with pytest.raises(CatalogMismatch, match="knob 'EXL3_GRAPHS'.*never reads the environment variable 'EXL3_GRAPHS_OFF'"):
        check_catalog(wrong)


def test_a_catalog_entry_naming_a_missing_callable_is_refused():
    wrong = _replace("cache_slots", applied_as=ExlArg("cache_slots", (("RecurrentCache", "max_batch_size"),)))
    with pytest.raises(CatalogMismatch, match="knob 'cache_slots'.*no RecurrentCache"):
        check_catalog(wrong)


@pytest.fixture(scope="module")
def drifted_exllamav3(tmp_path_factory):
    """A copy of the installed exllamav3 source in which upstream renamed an argument and dropped a variable."""
    root = tmp_path_factory.mktemp("drift") / "exllamav3"
    shutil.copytree(installed_surface().root, root, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    generator = root / "generator" / "generator.py"
    generator.write_text(generator.read_text().replace("prefill_cooldown: int | None = 4,", "cooldown: int = 4,", 1))
    gdn = root / "modules" / "gated_delta_net.py"
    gdn.write_text(gdn.read_text().replace('os.environ.get("EXL3_BC_GDN", "1")', '"1"'))
    return read_surface(root, version="9.9.9")


def test_an_upgraded_exllamav3_that_renamed_an_argument_is_caught(drifted_exllamav3):
    assert "prefill_cooldown" not in drifted_exllamav3.params["Generator"]
    with pytest.raises(CatalogMismatch, match="knob 'prefill_cooldown'.*exllamav3 9.9.9 Generator"):
        check_catalog(EXL3_KNOBS, drifted_exllamav3)


def test_an_upgraded_exllamav3_that_dropped_a_variable_is_caught(drifted_exllamav3):
    catalog = tuple(k for k in EXL3_KNOBS if k.name != "prefill_cooldown")
    with pytest.raises(CatalogMismatch, match="knob 'EXL3_BC_GDN'"):
        check_catalog(catalog, drifted_exllamav3)


def test_building_an_exllamav3_space_runs_the_check(drifted_exllamav3, qwen27b_dir):
    context = SpaceContext(engine="exllamav3", model=read_model_info(qwen27b_dir))
    with pytest.raises(CatalogMismatch, match="prefill_cooldown"):
        build_space(context, surface=drifted_exllamav3)
