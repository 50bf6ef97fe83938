"""The English stopword list of the lexical generator.

About 180 of the most frequent English function words: articles, pronouns, auxiliaries,
modals, prepositions, conjunctions and filler adverbs. Every form is lowercase and free
of apostrophes, because query terms reach this list after contractions and possessives
are reduced to their stems ("don't" -> "do", "I'm" -> "i", "what's" -> "what"), so each
such stem must be here for a contraction never to survive as a search term.

Content words that merely occur often ("like", "need", "use", "work") are deliberately
absent: in a memory store they are what users search for.
"""

from __future__ import annotations

__all__ = ["STOPWORDS"]

# Grouped by word class; one string keeps the list readable and diffable.
_WORDS = """
    a an the this that these those some any all each every both either neither no nor not
    such other another same own few more most less much many several

    i me my mine myself you your yours yourself yourselves he him his himself she her hers
    herself it its itself we us our ours ourselves they them their theirs themselves one

    what which who whom whose when where why how

    am is are was were be been being have has had having do does did doing done
    can could will would shall should may might must ought

    about above after against along among around at before behind below
    between beyond by down during for from in into of
    off on onto out over past since than through to
    under until up upon with within without via

    and but or so yet if because as while although though whether unless then else
    also just only very too here there now ever never always often still already even
    really quite rather well once again however perhaps maybe
    yes ok okay please let get got
"""

STOPWORDS: frozenset[str] = frozenset(_WORDS.split())
