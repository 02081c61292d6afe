"""Adapter methods for table maintenance and the Delta model configs (zorder_by, isolation_level,
checkpoint_interval, tblproperties): OPTIMIZE, VACUUM, history, RESTORE, time travel.

`DeltalogAdapter` mixes this class in; its methods are `@available` to Jinja.
"""


class MaintenanceMixin:
    pass
