"""Plain English text from the GNU Collaborative International Dictionary of
English (Debian package dict-gcide, /usr/share/dictd/gcide.dict.dz).

The .dict.dz file is dictzip, which is gzip-compatible. Entries are dictd
plain text with light markup; strip_markup() removes it:
  - source tags such as "[1913 Webster]", "[WordNet 1.5]", "[PJC]";
  - pronunciation/headword marks "\\A*buse"\\" (the part between backslashes);
  - cross-reference braces "{Abuse}" -> "Abuse";
  - quotation attributions "--Shak." / "--Jer. Taylor.";
  - sense numbers "1." / "(a)" at line starts, and runs of whitespace.
Paragraphs (blank-line separated blocks) become one line each.

Usage:
    from gcide_text import gcide_paragraphs
    for line in gcide_paragraphs(): ...
"""
import gzip
import re

GCIDE = "/usr/share/dictd/gcide.dict.dz"

_SOURCE_TAG = re.compile(r"\[(?:\d{4} Webster|Webster \d{4}|WordNet[^\]]*|PJC|Century Dict\.|"
                         r"Chambers[^\]]*|Cent\. Dict\.|Johnson|Obs\.|R\.|Archaic|Colloq\.|"
                         r"Prov\. Eng\.|Scot\.|Local, U\. S\.|U\. S\.|Eng\.|Rare)\]")
_BRACKETED = re.compile(r"\[[^\]]{0,40}\]")      # remaining short tags: [F. abus, L. ...] kept if long
_PRONUNCIATION = re.compile(r"\\[^\\\n]{0,80}\\")
_BRACES = re.compile(r"[{}]")
_ATTRIBUTION = re.compile(r"--\s?[A-Z][\w.' ]{0,40}\.?")
_SENSE = re.compile(r"(?m)^\s*(?:\d+\.|\([a-z]\))\s+")
_SPACE = re.compile(r"\s+")


def strip_markup(block):
    block = _SOURCE_TAG.sub(" ", block)
    block = _PRONUNCIATION.sub(" ", block)
    block = _BRACKETED.sub(" ", block)
    block = _BRACES.sub("", block)
    block = _ATTRIBUTION.sub(" ", block)
    block = _SENSE.sub(" ", block)
    return _SPACE.sub(" ", block).strip()


def gcide_paragraphs(path=GCIDE, min_chars=20):
    """Yields the dictionary's paragraphs as plain one-line strings."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    for block in re.split(r"\n\s*\n", text):
        line = strip_markup(block)
        if len(line) >= min_chars and not line.startswith("00-database"):
            yield line
