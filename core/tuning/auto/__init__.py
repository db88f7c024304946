"""Template-free schedule search (Ansor style): sketches derived by rules from a
compute (:mod:`.sketch`), wrapped as tasks of the common machinery (:mod:`.template`),
explored by an evolutionary search guided by the cost model (:mod:`.evolve`)."""

from ..task import auto_name
from .evolve import EvolutionaryTuner
from .sketch import CONSTANT_SELECTS, SearchHints, Sketch, tile_options
from .template import AUTO_PREFIX, AutoWorkload, auto_template, is_auto

__all__ = ["AUTO_PREFIX", "CONSTANT_SELECTS", "AutoWorkload", "EvolutionaryTuner",
           "SearchHints", "Sketch", "auto_name", "auto_template", "is_auto", "tile_options"]
