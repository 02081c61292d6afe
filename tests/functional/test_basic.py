from dbt.tests.adapter.basic.test_base import BaseSimpleMaterializations


class TestSimpleMaterializations(BaseSimpleMaterializations):
    pass
