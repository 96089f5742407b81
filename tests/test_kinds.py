"""Every kind of the attention package is held to the contract of tests/kind_harness.py (run by
tests/test_contract_*.py and tests/test_hybrid.py): a registered kind without a dense reference, or outside them,
fails here; docs/attention.md's table of options is the registry's, the options every kind of a base takes are
declared by that base alone, and what a kind declares is what its constructor takes."""
import dataclasses
import inspect
import pathlib
import re

import pytest
from flax import nnx

import attention
from attention import registry
from attention.hybrid import BasedAttention
from attention.input_gated import InputGatedAttention
from attention.kernelized_base import EPS, KernelizedAttention
from attention.score_base import ScoreAttention
from kind_harness import package_kinds, package_kinds_of, reference_for
from reference_recurrent import RECURRENCES

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

PACKAGE_KINDS = package_kinds()


def test_the_contract_files_run_every_kind_of_the_package():
    """tests/test_contract_scored.py and test_contract_kernelized.py split the package's kinds by base class,
    tests/test_hybrid.py runs the hybrid of the two and tests/test_input_gated.py the kinds that read the layer's
    input: a kind on none of them would escape the contract."""
    contracted = (package_kinds_of(ScoreAttention) + package_kinds_of(KernelizedAttention)
                  + package_kinds_of(BasedAttention) + package_kinds_of(InputGatedAttention))
    covered = {registry.get(name) for name in contracted}
    assert [name for name in PACKAGE_KINDS if registry.get(name) not in covered] == []


@pytest.mark.parametrize("base", [ScoreAttention, KernelizedAttention, InputGatedAttention],
                         ids=lambda base: base.__name__)
def test_base_options_are_declared_once_by_the_base(base):
    """The base declares them and its constructor names them; each kind on it reads them first, through
    **base_options, and its constructor names none of them again."""
    base_options = tuple(option.name for option in base.BASE_OPTIONS)
    assert base_options == tuple(option for option in inspect.signature(base.__init__).parameters
                                 if option not in ("self", "rngs"))
    kinds = package_kinds_of(base)
    assert [kind for kind in kinds if attention.options(kind)[:len(base_options)] != base_options] == []
    restated = {kind: sorted(set(inspect.signature(registry.get(kind).__init__).parameters) & set(base_options))
                for kind in kinds}
    assert {kind: options for kind, options in restated.items() if options} == {}


def _constructor_default(cls: type, option: str):
    """The default of `option` in the first constructor up cls's MRO that names it (a kind passes its base's
    options on as **base_options)."""
    return next(inspect.signature(ancestor.__init__).parameters[option].default for ancestor in cls.__mro__
                if option in inspect.signature(ancestor.__init__).parameters)


@pytest.mark.parametrize("kind", PACKAGE_KINDS)
def test_a_kind_declares_what_its_constructor_takes_at_its_defaults(kind):
    """Every keyword its constructor names beyond the wrapper's is declared, and every declared option is taken,
    at the declared default; building it with every declared default works."""
    cls = registry.get(kind)
    named = [name for name, parameter in inspect.signature(cls.__init__).parameters.items()
             if name not in ("self", "num_heads", "head_dim", "d_model", "rngs")
             and parameter.kind is parameter.KEYWORD_ONLY]
    declared = attention.options_of(kind)
    assert [name for name in named if name not in declared] == []
    assert {name: _constructor_default(cls, name) for name in declared} == {
        name: option.default for name, option in declared.items()}
    attention.create(kind, num_heads=2, head_dim=4, d_model=8, rngs=nnx.Rngs(0),
                     **{name: option.default for name, option in declared.items()})


@pytest.mark.parametrize("kind", attention.names())
def test_every_registered_kind_has_a_dense_reference(kind):
    """A kind that reads the layer's input has its recurrence instead (tests/reference_recurrent.py)."""
    if getattr(registry.get(kind), "reads_inputs", False):
        assert kind in RECURRENCES, f"declare {kind!r}'s recurrence in tests/reference_recurrent.py"
    else:
        reference_for(kind)  # raises, naming the kind and where to declare its reference


# Base options first, then options of one kind; chunk_size 1.5: an integer option takes integers only.
BAD_VALUES = [("dropout_rate", 1.0), ("dropout_rate", -0.1), ("eps", 0.0), ("eps", -1e-6), ("chunk_size", -1),
              ("chunk_size", 1.5), ("kernelized_implementation", "cudnn"), ("softmax_implementation", "pallas"),
              ("num_features", 0), ("redraw_every_steps", -1), ("distill_weight", -0.5),
              ("hedgehog_logit_scale", 0.0), ("gate", "vector")]


@pytest.mark.parametrize("option, value", BAD_VALUES)
def test_a_bad_option_value_is_refused_by_its_declaration_naming_it(option, value):
    """By every kind that takes the option, in a message that starts with option=value (training/validate.py
    reports it under the config field)."""
    kinds = [kind for kind in PACKAGE_KINDS if option in attention.options(kind)]
    assert kinds
    for kind in kinds:
        with pytest.raises(ValueError, match="^" + re.escape(f"{option}={value!r} must be ")):
            attention.create(kind, num_heads=2, head_dim=4, rngs=nnx.Rngs(0), **{option: value})


def _readme_options() -> dict[str, tuple[str, str, str]]:
    """docs/attention.md's table of options: option -> (default, kinds, what it sets), as written."""
    readme = (pathlib.Path(__file__).parents[1] / "docs" / "attention.md").read_text()
    table = readme[readme.index("| option | default | kinds | what it sets |"):].split("\n\n")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {option.strip("`"): (default, kinds, help) for option, default, kinds, help in rows}


def test_readme_table_of_options_is_the_registry():
    """Every option with its declared default, the kinds that take it (the package's, and their aliases) and its
    help, one row each: the help of an option is one, whichever kind declares it."""
    kinds = {option: [name for name in PACKAGE_KINDS if option in attention.options(name)]
             for option in attention.option_defaults()}
    helps = {option: {attention.options_of(kind)[option].help for kind in kinds[option]} for option in kinds}
    want = {option: (str(default), ", ".join(kinds[option]), *helps[option])
            for option, default in attention.option_defaults().items() if kinds[option]}
    assert _readme_options() == want


def test_a_kind_without_a_reference_or_with_a_second_default_is_refused(monkeypatch):
    class Unreferenced(registry.get("linear")):
        OWN_OPTIONS = (dataclasses.replace(EPS, default=1e-3),)

    monkeypatch.setitem(registry._KINDS, "unreferenced", Unreferenced)  # undone after the test
    with pytest.raises(LookupError, match="'unreferenced' has no dense reference"):
        reference_for("unreferenced")
    message = "option 'eps' defaults to 1e-06 in kind 'based' but to 0.001 in 'unreferenced'"
    with pytest.raises(ValueError, match=message):
        attention.option_defaults()


def test_readme_kinds_table_lists_each_kinds_own_options():
    """README's table of kinds: each row's options are options of its kind, and name every option the kind itself
    declares (OWN_OPTIONS, but for the implementation options the text below the table explains): the gated kinds'
    decay_bias was missing."""
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    table = readme[readme.index("| kind | paper | feature dim m | options (besides the shared ones) |"):].split("\n\n")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    implementation = {"softmax_implementation", "kernelized_implementation"}
    for cells in rows:
        kind = re.findall(r"`(\w+)`", cells[0])[0]
        listed = set(re.findall(r"`(\w+)`", cells[-1]))
        own = {option.name for option in registry.get(kind).OWN_OPTIONS} - implementation
        assert own <= listed <= set(attention.options(kind)), (kind, listed)
    assert {re.findall(r"`(\w+)`", cells[0])[0] for cells in rows} >= set(PACKAGE_KINDS) - {"scaled_dot"}
