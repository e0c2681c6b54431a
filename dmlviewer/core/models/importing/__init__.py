"""Import a model trained elsewhere from its weights file(s) into a dmlviewer checkpoint
(``dmlviewer import-model``, File > Import Model; docs/internals.md "core.models.importing").

1. **Read** (:mod:`.sources`) every file with ``read_weights_file`` (``torch.load(weights_only=True)``
   or safetensors); wrappers are unwrap rules (``state_dict``, ``model``, ``net``, ...; a dict of
   state dicts such as ``{"trunk": ..., "embedder": ...}``; ``module.``/``_orig_mod.`` prefixes);
   several files are merged (pytorch-metric-learning's trunk and embedder), the backbone's file
   first. A Hugging Face folder is read by its family.
2. **Walk the families** (:mod:`.registry`, one module per family in ``families/``, each a
   :class:`~.family.Family` record of detect / convert / shortlist / defaults / checks): each
   detects its layout in the keys as the families before it left them, converts it to the layout
   its candidates are built with (torchvision's ViT, RegNet, ConvNeXt and Swin to timm's,
   cnnimageretrieval's ResNet to torchvision's, the DINOv2 repository's to timm's), says what
   its metadata tells (pooling, input size and normalization) and which candidates to try first.
3. **Recognize** (:mod:`.candidates`) the backbone among the shortlisted candidates, then the
   built-in backbones and timm's CNNs, built on the meta device; several full matches with the
   same keys are compared with the file's weights.
4. **Propose the head** (:mod:`.head`) from the keys left over and **fold** it (:mod:`.fold`)
   exactly into dmlviewer's head, or keep it layer by layer where it cannot fold.
5. **Write** (:mod:`.writing`) the checkpoint atomically, checked against its own source layers
   and, with a reference file (:mod:`.reference`), against the user's embeddings.

Never a silent difference: whatever the files cannot tell is an assumption, printed on one
``ASSUMED`` line and recorded in the checkpoint. Messages name the user's inputs by field
identifier (``{head}``, :data:`.errors.FIELDS`; :mod:`dmlviewer.core.fields`): the command line
words them as options, the dialog as its fields. Nothing here runs code from a file.
"""

from .candidates import Candidate, Match, ViTLayout, candidate, match, matches
from .errors import FIELDS, ImportInputError, LayoutError, named
from .families.timm_cnn import TIMM_SHORTLIST
from .families.timm_vit import TIMM_VIT_SHORTLIST
from .family import Defaults, Family, Found, Options
from .fold import FoldedHead, fold_head
from .head import HEAD_SPEC_HELP, Layer
from .plan import ImportPlan, analyze
from .reference import CHECK_TOLERANCE, compare_with_reference, describe_reference_check, read_reference
from .registry import FAMILIES, candidate_names
from .sources import Sources, read_sources
from .two_branch import (TWO_BRANCH_INHERITED, analyze_two_branch, check_two_branch_plans, plan_dim,
                         two_branch_report, write_two_branch_checkpoint)
from .writing import build_imported, check_head, write_checkpoint

__all__ = [
    "CHECK_TOLERANCE", "FAMILIES", "FIELDS", "HEAD_SPEC_HELP", "TIMM_SHORTLIST", "TIMM_VIT_SHORTLIST",
    "TWO_BRANCH_INHERITED", "Candidate", "Defaults", "Family", "FoldedHead", "Found", "ImportInputError",
    "ImportPlan", "Layer", "LayoutError", "Match", "Options", "Sources", "ViTLayout", "analyze",
    "analyze_two_branch", "build_imported", "candidate", "candidate_names", "check_head", "check_two_branch_plans",
    "compare_with_reference", "describe_reference_check", "fold_head", "match", "matches", "named", "plan_dim",
    "read_reference", "read_sources", "two_branch_report", "write_checkpoint", "write_two_branch_checkpoint",
]
