"""Attention options scoped by base: softmax_implementation for the dot-product kinds, kernelized_implementation
for the kernelised ones, so that a translation model with softmax in some roles and linear attention in another
takes cuDNN for one and Pallas for the other; each refused in one line where no role reads it; the name they
replaced refused, naming them; and the config checks read the kinds' declarations, building none."""
import re

import pytest
from flax import nnx

import attention
from attention import registry
from configs import translation as translation_config
from configs import workdir as workdir_config
from training import model_config, validate
from training.config_checks import ConfigError
from runtime.workdirs import WorkdirError
from kind_harness import package_kinds


def _mixed_config(softmax_implementation: str = "auto", kernelized_implementation: str = "auto"):
    """Softmax in the encoder and the decoder, linear attention in the cross-attention."""
    config = translation_config.get_config("tiny")
    config.attention.name, config.attention.cross = "softmax", "linear"
    config.attention.softmax_implementation = softmax_implementation
    config.attention.kernelized_implementation = kernelized_implementation
    return config


def _refusal(config) -> str:
    with pytest.raises(ConfigError) as error:
        validate.validate(config)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_each_kind_reports_the_implementation_option_of_its_base():
    assert attention.options_of("softmax")["softmax_implementation"].choices == ("auto", "xla", "cudnn")
    assert attention.options_of("linear")["kernelized_implementation"].choices == ("auto", "xla", "pallas",
                                                                                   "autodiff")
    assert attention.options_of("gated_linear")["kernelized_implementation"].choices == ("auto", "autodiff")
    assert "softmax_implementation" not in attention.options("local")  # its window keeps softmax at auto
    assert "softmax_implementation" not in attention.options("linear")
    assert "kernelized_implementation" not in attention.options("softmax")


def test_a_mixed_model_takes_cudnn_for_softmax_and_pallas_for_linear(monkeypatch):
    """Validated from the declarations alone (every kind's constructor raises here), each kind given its own."""
    def unbuildable(kind):
        def refuse(*args, **kwargs):
            raise AssertionError(f"kind {kind!r} built")
        return type(f"Unbuildable_{kind}", (registry.get(kind),), {"__init__": refuse})

    for kind in attention.names():
        monkeypatch.setitem(registry._KINDS, kind, unbuildable(kind))
    monkeypatch.setitem(validate.DEVICE_BOUND, "softmax_implementation", ("cudnn", lambda: None))  # an NVIDIA GPU
    config = _mixed_config("cudnn", "pallas")
    validate.validate(config)
    options = model_config.kind_options(config, ("encoder_self", "decoder_self", "cross"))
    assert options["softmax"]["softmax_implementation"] == "cudnn"
    assert options["linear"]["kernelized_implementation"] == "pallas"


def test_off_a_gpu_the_mixed_model_refuses_cudnn_as_a_softmax_model_does():
    softmax_only = translation_config.get_config("tiny")
    softmax_only.attention.softmax_implementation = "cudnn"
    assert _refusal(_mixed_config("cudnn", "pallas")) == _refusal(softmax_only) == (
        "config.attention.softmax_implementation='cudnn' (kind 'softmax') cannot run here: it needs an NVIDIA GPU; "
        "this process runs on cpu; use 'auto' (it takes what runs here) or 'xla'")
    validate.validate(_mixed_config("xla", "pallas"))  # Pallas runs in interpret mode off a GPU


def _readers(package_readers: str, option: str) -> str:
    """The package's kinds that read `option`, with any kind a test registered that reads it (collecting the
    suite imports tests/test_kind_demo.py, whose kind is kernelised), as the refusals list them."""
    added = [name for name in attention.names() if name not in package_kinds() and option in attention.options_of(name)]
    return ", ".join(sorted(package_readers.split(", ") + added))


def test_pallas_where_no_role_is_kernelised_is_refused_in_one_line():
    config = _mixed_config()
    config.attention.cross = "local"
    config.attention.kernelized_implementation = "pallas"
    assert _refusal(config) == (
        "config.attention.kernelized_implementation='pallas' is read by no kind in use (encoder_self: softmax, "
        "decoder_self: softmax, cross: local), only by " + _readers(
            "based, cosformer, delta, exp_limit, gated_delta, gated_linear, hedgehog, linear, mala, performer, relu, taylor",
            "kernelized_implementation") + "; leave it at 'auto'")


def test_cudnn_where_no_role_is_softmax_is_refused_in_one_line():
    config = _mixed_config(softmax_implementation="cudnn")
    config.attention.name = "performer"
    assert _refusal(config) == (
        "config.attention.softmax_implementation='cudnn' is read by no kind in use (encoder_self: performer, "
        "decoder_self: performer, cross: linear), only by dot, scaled_dot, softmax; leave it at 'auto'")


def _replaced() -> str:
    return ("replaced by softmax_implementation (auto, xla, cudnn; read by dot, scaled_dot, softmax) and "
            "kernelized_implementation (auto, xla, pallas, autodiff; read by " + _readers(
                "based, cosformer, delta, exp_limit, gated_delta, gated_linear, hedgehog, linear, mala, performer, relu, "
                "taylor", "kernelized_implementation") + ")")


def test_the_replaced_name_is_refused_naming_its_replacements():
    config = translation_config.get_config("tiny")
    config.attention.implementation = "cudnn"
    assert _refusal(config) == f"config.attention.implementation is {_replaced()}"
    with pytest.raises(ValueError, match=re.escape(f"attention option 'implementation' is {_replaced()}")):
        attention.create("softmax", num_heads=2, head_dim=4, rngs=nnx.Rngs(0), implementation="xla")


def test_a_workdir_config_of_the_replaced_name_loads_at_its_default_only():
    """A run's config.json from before the split holds implementation='auto', which both replacements mean."""
    record = translation_config.get_config("tiny").to_dict()
    del record["attention"]["softmax_implementation"], record["attention"]["kernelized_implementation"]
    record["attention"]["implementation"] = "auto"
    config = workdir_config.from_record(record, "runs/x/config.json")
    assert (config.attention.softmax_implementation, config.attention.kernelized_implementation) == ("auto", "auto")
    assert "implementation" not in config.attention
    record["attention"]["implementation"] = "cudnn"
    with pytest.raises(WorkdirError, match=re.escape(f"runs/x/config.json: field attention.implementation='cudnn' is "
                                                     f"{_replaced()}; pass the run's")):
        workdir_config.from_record(record, "runs/x/config.json")
