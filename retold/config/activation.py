"""``activation:`` - which memories become part of every session's profile, and how big the
profile may grow. Kept beside ``retold.config`` (which includes it in :class:`Config`) so
that module stays one screenful per block.

The category names are those of ``retold.activation.categories`` plus any that
``extra_keywords`` introduces; see docs/decisions.md, "Categories come from keywords".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ActivationConfig", "CategoryKeywords", "activation_errors"]


@dataclass(frozen=True, slots=True)
class CategoryKeywords:
    """``activation.extra_keywords[]:`` - more words for one category (a new category, or
    one of the built-in ones); tried before the built-in vocabulary."""

    category: str = ""
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ActivationConfig:
    """``activation:`` - the activation policy and the per-session profile block."""

    enabled: bool = True  # false: no record becomes ambient and every profile is empty
    # Categories a user-stated fact about the user may enter the profile in; their order is
    # the profile's order.
    promotable_categories: tuple[str, ...] = (
        "instruction", "communication", "identity", "accessibility", "diet", "tools")
    # Categories that never enter the profile on the policy's own decision.
    sensitive_categories: tuple[str, ...] = ("health", "finance", "relationships", "beliefs")
    extra_keywords: tuple[CategoryKeywords, ...] = ()
    profile_max_tokens: int = 300  # cap on the profile block's text (about four characters a token)


def activation_errors(cfg: ActivationConfig) -> list[str]:
    """What the type check cannot judge: a category both promotable and sensitive, and
    keyword entries without a category or a keyword."""
    errors: list[str] = []
    both = sorted(set(cfg.promotable_categories) & set(cfg.sensitive_categories))
    if both:
        errors.append(f"activation.sensitive_categories: {', '.join(both)} cannot also be promotable")
    for i, entry in enumerate(cfg.extra_keywords):
        key = f"activation.extra_keywords[{i}]"
        if not entry.category.strip():
            errors.append(f"{key}.category: must name a category")
        if not [k for k in entry.keywords if k.strip()]:
            errors.append(f"{key}.keywords: must hold at least one keyword")
    return errors
