"""The ``hosted:`` block: a provider, endpoint and key variable that fit the configured
models load; a mismatch is one line naming the key to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold.config import read_config
from retold.errors import ConfigError

OPENROUTER = {"provider": "openai", "base_url": "https://openrouter.ai/api/v1",
              "api_key_env": "OPENROUTER_API_KEY"}
GPT = {"extraction_model": "gpt-4o-mini", "review_model": "gpt-4o-mini"}


def refused(overrides: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        read_config(overrides=overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_an_openai_compatible_server_loads_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("hosted:\n  provider: openai\n  base_url: http://localhost:11434/v1\n"
                    "  api_key_env: OLLAMA_API_KEY\n  structured_output: tools\n"
                    "ingestion:\n  extraction_model: llama3.1:8b\n  review_model: llama3.1:8b\n", "utf-8")

    hosted = read_config(path).hosted

    assert (hosted.provider, hosted.base_url, hosted.api_key_env, hosted.structured_output) == (
        "openai", "http://localhost:11434/v1", "OLLAMA_API_KEY", "tools")


def test_openai_itself_needs_no_base_url_once_the_models_are_its_own() -> None:
    config = read_config(overrides={"hosted": {"provider": "openai", "api_key_env": "OPENAI_API_KEY"},
                                    "ingestion": GPT})
    assert config.hosted.base_url is None


def test_a_proxy_may_serve_claude_names_over_the_openai_protocol() -> None:
    config = read_config(overrides={"hosted": {**OPENROUTER, "base_url": "http://litellm:4000/v1"}})
    assert config.ingestion.extraction_model.startswith("claude-")


def test_openai_with_the_anthropic_key_variable_names_api_key_env() -> None:
    message = refused({"hosted": {"provider": "openai"}, "ingestion": GPT})

    assert message.startswith("hosted.api_key_env: ANTHROPIC_API_KEY")
    assert "OPENAI_API_KEY" in message


def test_openai_without_base_url_and_claude_models_names_base_url() -> None:
    message = refused({"hosted": {"provider": "openai", "api_key_env": "OPENAI_API_KEY"},
                       "retrieval": {"rewrite": {"enabled": True}}})

    assert message.startswith("hosted.base_url: not set")
    assert "ingestion.extraction_model, ingestion.review_model, retrieval.rewrite.model" in message


def test_anthropic_with_a_model_it_does_not_serve_names_the_model_key() -> None:
    message = refused({"ingestion": {"review_model": "gpt-4o-mini"}})

    assert message.startswith("ingestion.review_model: hosted.provider anthropic serves only claude-*")
    assert "hosted.provider: openai" in message


def test_a_disabled_rewriter_model_is_not_checked() -> None:
    config = read_config(overrides={"retrieval": {"rewrite": {"enabled": False, "model": "gpt-4o-mini"}}})
    assert config.retrieval.rewrite.model == "gpt-4o-mini"


@pytest.mark.parametrize(("hosted", "starts"), [
    ({"base_url": "localhost:11434/v1"}, "hosted.base_url: must be an http:// or https:// URL"),
    ({"api_key_env": " "}, "hosted.api_key_env: must name the environment variable"),
    ({"provider": "azure"}, "hosted.provider: must be one of"),
    ({"structured_output": "json"}, "hosted.structured_output: must be one of"),
], ids=["url", "empty-key-env", "provider", "structured-output"])
def test_a_malformed_hosted_value_is_one_line_naming_it(hosted: dict[str, object], starts: str) -> None:
    assert refused({"hosted": {**OPENROUTER, **hosted}}).startswith(starts)


def test_the_readme_example_for_an_openai_compatible_server_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text(encoding="utf-8")
    block = readme.split("```yaml\nhosted:\n  provider: openai\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "config.yaml"
    path.write_text("hosted:\n  provider: openai\n" + block, "utf-8")

    config = read_config(path)

    assert (config.hosted.provider, config.hosted.base_url) == ("openai", "http://localhost:11434/v1")
    assert config.ingestion.extraction_model == config.retrieval.rewrite.model == "qwen2.5:14b"
