"""One registration habit: every registry's ``register()`` refuses a key already taken, in one line naming it
(metrics: tests/test_results_registry.py; sources: tests/test_sources.py; samplers here)."""
from __future__ import annotations

import pytest

import dllm_lit.samplers as samplers


def test_sampler_register_exports_a_name_and_refuses_a_taken_one() -> None:
    try:
        samplers.register("MyMDLM", "dllm_lit.samplers.mdlm")  # a full dotted module name, as for a user's module
        assert "MyMDLM" in samplers.__all__ and "MyMDLM" in dir(samplers)
        with pytest.raises(ValueError, match=r"^sampler 'MyMDLM' is already registered; choose another name$"):
            samplers.register("MyMDLM", "mdlm")
    finally:
        samplers._EXPORTS.pop("MyMDLM", None)
        if "MyMDLM" in samplers.__all__:
            samplers.__all__.remove("MyMDLM")
    with pytest.raises(ValueError, match=r"^sampler 'MDLM' is already registered; choose another name$"):
        samplers.register("MDLM", "mdlm")
    assert samplers._EXPORTS["MDLM"] == "mdlm"
