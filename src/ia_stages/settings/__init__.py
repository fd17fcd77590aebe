"""Every setting of ia-stages, declared once: the settings tree and its parts.

The tree (:class:`Settings`) is the one description of a run; its parts are the search
(:class:`SearchSettings`), the attention (:class:`AttentionSettings`), Algorithm 1
(:class:`MeanSettings`), the read-out (:class:`ReadoutSettings`), the stopping rule
(:class:`StopSettings`), the path (:class:`PathSettings` with :class:`FeatureSettings`), the
group (:class:`GroupSettings`), and the images' noise and mask (:class:`NoiseSettings`,
:class:`MaskSettings`). Each field is declared with its range and documentation
(:mod:`ia_stages.settings.spec`), which check it, write it and generate the JSON schema, the
command's flags and the docs' configuration reference. Nothing here computes on images:
this is the bottom layer of the package, imported by every other.

How one setting travels, for example ``sigma``: the estimator's ``sigma=`` parameter, the
YAML's ``settings: {sigma: 2}``, or ``ia-stages cluster --sigma 2`` sets
``Settings.sigma`` (checked here); :func:`ia_stages.ia.loop.run_ia` (in one process) or the
pipeline's stages (in jobs, from :meth:`Settings.subset`) pass ``s.sigma`` to
:func:`ia_stages.kmax.kappa_max`, whose image preparation smooths by it before the search.
"""

from ia_stages.settings.attention import AttentionSettings, MeanSettings
from ia_stages.settings.features import DEFAULT_FEATURES, FeatureSettings
from ia_stages.settings.group import GroupSettings
from ia_stages.settings.images import MaskSettings, NoiseSettings
from ia_stages.settings.path import PathSettings, first_pass_search
from ia_stages.settings.readout import ReadoutSettings, StopSettings
from ia_stages.settings.search import DENSE_REFERENCE, EXACT_SEARCH, SearchSettings
from ia_stages.settings.sizing import knn_features, knn_width, sized, sized_neighbours
from ia_stages.settings.spec import SettingError
from ia_stages.settings.tree import DEFAULT_PRESET, PRESETS, Settings, preset

__all__ = [
    "DEFAULT_FEATURES",
    "DEFAULT_PRESET",
    "DENSE_REFERENCE",
    "EXACT_SEARCH",
    "PRESETS",
    "AttentionSettings",
    "FeatureSettings",
    "GroupSettings",
    "MaskSettings",
    "MeanSettings",
    "NoiseSettings",
    "PathSettings",
    "ReadoutSettings",
    "SearchSettings",
    "SettingError",
    "Settings",
    "StopSettings",
    "first_pass_search",
    "knn_features",
    "knn_width",
    "preset",
    "sized",
    "sized_neighbours",
]
