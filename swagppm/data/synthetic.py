"""The built-in synthetic corpus: injury-like narratives made from the project's own word lists (offline)."""

from __future__ import annotations

import numpy as np

_INJURIES = (
    ("fracture", ("fractured", "broke", "cracked"), ("leg", "wrist", "ankle", "rib", "arm", "hip")),
    ("amputation", ("amputated", "severed", "lost the tip of"), ("finger", "thumb", "toe", "fingertip")),
    ("burn", ("burned", "scalded", "seared"), ("hand", "forearm", "face", "chest")),
    ("laceration", ("cut", "lacerated", "sliced"), ("hand", "palm", "scalp", "forearm")),
    ("contusion", ("bruised", "struck", "crushed"), ("shoulder", "knee", "foot", "back")),
    ("sprain", ("sprained", "twisted", "strained"), ("ankle", "knee", "wrist", "back")),
    ("electric shock", ("was shocked through", "received a shock to", "was electrocuted through"),
     ("hand", "arm", "body")),
    ("heat illness",
     ("collapsed from heat with cramps in", "fainted from heat with pain in", "overheated with weakness in"),
     ("legs", "body", "arms")),
    ("puncture", ("punctured", "pierced", "stabbed"), ("hand", "foot", "thigh", "palm")),
    ("hearing loss", ("lost hearing in", "damaged the eardrum of", "suffered ringing in"),
     ("ear", "left ear", "right ear")),
    ("chemical burn", ("splashed acid on", "got caustic on", "spilled solvent on"), ("face", "eyes", "hand")),
    ("crush injury", ("caught and crushed", "pinned", "compressed"), ("hand", "pelvis", "leg", "foot")),
)
_WORKERS = ("An employee", "A worker", "A laborer", "A technician", "A driver", "An operator", "A welder", "A roofer")
_PLACES = ("at a warehouse", "on a construction site", "in a machine shop", "at a plant", "on a loading dock",
           "in a kitchen", "at a farm", "in a freezer room")
_CAUSES = ("while operating a press", "after slipping on ice", "while unloading a truck", "when a ladder shifted",
           "while cleaning a conveyor", "when a pallet fell", "while repairing a pump", "during a routine shift")
_OUTCOMES = ("and was hospitalized.", "and was taken to the hospital.", "and received treatment.",
             "and was kept overnight.", "and was released the next day.")


def synthetic_corpus(size: int = 600, *, num_classes: int = 8, seed: int = 0) -> tuple[list[str], list[str]]:
    """Injury-like narratives with Zipf-imbalanced classes, made from our own word lists.

    Class ``k`` gets a share proportional to ``1/(k+1)``; about 10% of the records
    borrow the verb of another class, so the task is learnable but not trivial.
    """
    if not 2 <= num_classes <= len(_INJURIES):
        raise ValueError(f"num_classes must be between 2 and {len(_INJURIES)}, got {num_classes}")
    if size < 2 * num_classes:
        raise ValueError(f"size must be at least twice num_classes ({2 * num_classes}): every class appears twice, "
                         f"got {size}")
    rng = np.random.default_rng(seed)
    shares = 1.0 / np.arange(1, num_classes + 1)
    labels_idx = rng.choice(num_classes, size=size, p=shares / shares.sum())
    labels_idx[: 2 * num_classes] = np.repeat(np.arange(num_classes), 2)  # every class at least twice
    texts, labels = [], []
    for k in labels_idx:
        name, _verbs, parts = _INJURIES[k]
        verb_class = rng.integers(num_classes) if rng.random() < 0.1 else k
        verb = _pick(rng, _INJURIES[verb_class][1])
        sentence = (f"{_pick(rng, _WORKERS)} {_pick(rng, _PLACES)} {verb} the {_pick(rng, parts)} "
                    f"{_pick(rng, _CAUSES)} {_pick(rng, _OUTCOMES)}")
        texts.append(sentence)
        labels.append(name)
    return texts, labels


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def synthetic_labels(num_classes: int) -> tuple[str, ...]:
    """The classes of ``synthetic_corpus(num_classes=...)``, sorted: its declared label set (fixed by the setting,
    whatever records the seed draws)."""
    return tuple(sorted(name for name, _verbs, _parts in _INJURIES[:num_classes]))
