"""Dashboards: reports (tables, Pareto and speedup plots) from the result store and MLflow,
and the ripple-effect analysis (the RPS paper's Figure 1)."""
from .pareto import ACCURACY_NFE, ACCURACY_TPS, dominates, front_flags, pareto_front  # noqa: F401
