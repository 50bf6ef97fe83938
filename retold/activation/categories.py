"""What a memory is about, in a few words: the category the activation policy and the
profile's inventory use.

A small keyword classifier over the record's attribute and content, with no model and no
I/O, so a category is cheap, deterministic and explainable ("matched 'vegetarian' in
the content"). The attribute is a writer's short name for the fact (``answer_language``,
``diet``) and says most; the content decides when the attribute names nothing known.
Sensitive vocabulary is looked for in both, and wins: "Aditya avoids sugar because of his
diabetes" is a health fact, whatever its attribute says. See docs/decisions.md,
"Categories come from keywords".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["BUILTIN_CATEGORIES", "Categorized", "CategoryRules", "words"]

# (category, keywords). A keyword matches a whole word or its plural ("peanut" matches
# "peanuts", never "peanutbutter"); one ending in ``*`` matches every word it starts
# ("allerg*" matches "allergic"); one with a space matches those words in sequence. The
# order decides between two categories that both match the same text: the first wins.
BUILTIN_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # sensitive by default (activation.sensitive_categories)
    ("health", (
        "health", "healthcare", "medic*", "diagnos*", "disease", "illness", "sick", "diabet*",
        "asthma", "cancer", "pregnan*", "depress*", "anxiety", "therap*", "psychiatr*", "mental",
        "adhd", "autis*", "surger*", "prescri*", "symptom", "blood pressure", "hiv", "migraine",
        "injur*", "insulin", "chronic", "doctor", "hospital", "disorder", "epilep*", "penicillin",
        "medical condition", "seizure", "arthritis", "cholesterol", "heart condition", "rehab")),
    ("finance", (
        "salary", "salaries", "income", "earn", "bank", "banking", "debt", "loan", "mortgage",
        "credit card", "credit score", "savings", "invest*", "tax", "wealth", "net worth",
        "financ*", "payroll", "pension", "bankrupt*", "paycheck", "owe", "money")),
    ("relationships", (
        "wife", "husband", "spouse", "boyfriend", "girlfriend", "divorc*", "dating", "married",
        "marriage", "fiance", "fiancee", "affair", "breakup", "break up", "romantic",
        "relationship", "sexual*", "gay", "lesbian", "bisexual", "custody")),
    ("beliefs", (
        "religio*", "church", "mosque", "synagogue", "prayer", "pray", "faith", "politic*",
        "vote", "voted", "atheis*", "ramadan")),
    # promotable by default (activation.promotable_categories)
    ("instruction", (
        "instruction", "rule", "convention", "workflow", "process", "procedure", "guideline",
        "checklist", "standing", "deploy", "deployment", "release", "commit", "branch",
        "code review", "always", "never", "from now on", "every time", "whenever", "by default",
        "make sure")),
    ("tools", (
        "editor", "ide", "vim", "neovim", "emacs", "vscode", "vs code", "terminal", "shell", "bash",
        "zsh", "linux", "macos", "windows", "laptop", "python", "javascript", "typescript", "rust",
        "golang", "java", "kotlin", "framework", "toolchain", "tooling", "package manager",
        "docker", "kubernetes", "cluster", "cloud provider", "aws", "gcp", "azure", "browser",
        "git", "github", "gitlab", "database", "postgres", "sqlite", "programming language",
        "operating system", "keyboard layout", "environment", "stack", "notebook", "jupyter",
        "tool", "app", "software", "figma")),
    ("communication", (
        "language", "tone", "style", "format", "formatting", "verbos*", "concise", "brief",
        "length", "answer", "reply", "replies", "respon*", "spelling", "british", "american",
        "english", "formal", "casual", "bullet", "markdown", "emoji", "explanation", "greeting",
        "unit", "metric", "imperial", "jargon", "summar*", "detail", "detailed", "communicat*",
        "writing", "wording", "prose", "citation", "translat*")),
    ("accessibility", (
        "accessib*", "screen reader", "screenreader", "dyslex*", "colour blind", "color blind",
        "colorblind", "large font", "font", "caption*", "subtitle*", "hearing", "deaf", "blind",
        "low vision", "wheelchair", "high contrast", "contrast", "magnif*", "keyboard only")),
    ("diet", (
        "diet", "dietary", "vegetarian", "vegan", "pescatarian", "halal", "kosher", "gluten",
        "lactose", "dairy", "allerg*", "peanut", "shellfish", "meat", "pork", "beef", "food",
        "eat", "eating", "meal", "cuisine", "spicy", "coffee", "tea", "caffeine", "alcohol",
        "drink", "nut", "sugar", "snack")),
    ("identity", (
        "name", "pronoun", "role", "title", "job", "position", "occupation", "profession",
        "employer", "company", "team", "department", "timezone", "time zone", "nickname",
        "works as", "works at")),
    # neither promotable nor sensitive by default: found by search only
    ("contact", ("email", "phone", "address", "mobile", "contact", "postcode", "zip code")),
    ("location", ("home", "city", "lives", "live in", "located", "location", "country",
                  "hometown", "based in", "neighbourhood", "neighborhood")),
    ("schedule", ("schedule", "calendar", "meeting", "deadline", "appointment", "vacation",
                  "holiday", "trip", "flight", "availability", "office hours")),
    ("personal", ("birthday", "age", "hobby", "hobbies", "pet", "dog", "cat", "favourite",
                  "favorite", "sport", "music", "movie", "book")),
    ("work", ("project", "customer", "client", "account", "billing", "contract", "renewal",
              "ticket", "budget", "vendor", "invoice", "sprint", "roadmap", "launch")),
)

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def words(text: str | None) -> tuple[str, ...]:
    """Lowercase words of ``text``; underscores and punctuation separate words."""
    return tuple(_WORD.findall((text or "").lower().replace("_", " ")))


def _word_matches(keyword: str, token: str) -> bool:
    if keyword.endswith("*"):
        return token.startswith(keyword[:-1])
    return token in (keyword, f"{keyword}s", f"{keyword}es")


@dataclass(frozen=True)
class _Keyword:
    """A keyword split into words, with the token forms its first word accepts, so most
    keywords are ruled out by one set lookup instead of a scan of every token (the
    post-write pass categorises every record a session writes)."""

    text: str
    parts: tuple[str, ...]
    first_forms: frozenset[str] | None  # None: the first word is a prefix (``foo*``)

    @classmethod
    def of(cls, text: str) -> _Keyword:
        parts = tuple(text.split())
        first = parts[0] if parts else ""
        forms = None if not parts or first.endswith("*") else frozenset((first, f"{first}s", f"{first}es"))
        return cls(text, parts, forms)

    def found_in(self, tokens: Sequence[str], token_set: frozenset[str]) -> bool:
        if self.first_forms is not None and self.first_forms.isdisjoint(token_set):
            return False
        if len(self.parts) == 1:  # a whole word (already found) or a prefix
            stem = self.parts[0][:-1]
            return self.first_forms is not None or any(token.startswith(stem) for token in token_set)
        n = len(self.parts)
        return any(all(_word_matches(part, token)
                       for part, token in zip(self.parts, tokens[i:i + n], strict=True))
                   for i in range(len(tokens) - n + 1))


@dataclass(frozen=True)
class Categorized:
    """A record's category and, when sensitive vocabulary was found, which category and
    keyword made it sensitive."""

    category: str | None  # None: no keyword matched
    matched: str | None  # the keyword that decided
    sensitive: bool


class CategoryRules:
    """The built-in vocabulary plus configured keywords; ``sensitive`` names the categories
    whose vocabulary is looked for in the content as well as the attribute."""

    def __init__(self, sensitive: Iterable[str], extra: Iterable[tuple[str, Sequence[str]]] = ()) -> None:
        rules: dict[str, list[str]] = {name: list(keys) for name, keys in BUILTIN_CATEGORIES}
        added: list[tuple[str, list[str]]] = []
        for name, keys in extra:
            if name in rules:
                rules[name] = [*keys, *rules[name]]
            else:
                added.append((name, [k.lower() for k in keys]))
        # Configured categories are tried before the built-in ones, so they can claim a word.
        self._rules = [(name, [_Keyword.of(key) for key in keys]) for name, keys in [*added, *rules.items()]]
        self._sensitive = frozenset(sensitive)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._rules)

    def categorize(self, attribute: str | None, content: str) -> Categorized:
        """The category of a fact: sensitive vocabulary anywhere first, then the
        attribute's words, then the content's."""
        attr, body = words(attribute), words(content)
        for tokens in (attr, body):
            hit = self._first(tokens, sensitive_only=True)
            if hit is not None:
                return Categorized(hit[0], hit[1], True)
        for tokens in (attr, body):
            hit = self._first(tokens, sensitive_only=False)
            if hit is not None:
                return Categorized(hit[0], hit[1], False)
        return Categorized(None, None, False)

    def _first(self, tokens: Sequence[str], *, sensitive_only: bool) -> tuple[str, str] | None:
        token_set = frozenset(tokens)
        for name, keys in self._rules:
            if sensitive_only and name not in self._sensitive:
                continue
            for key in keys:
                if key.found_in(tokens, token_set):
                    return name, key.text
        return None
