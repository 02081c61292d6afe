"""Random models and data tests for the differential fuzz (tests/functional/test_in_process_is_spark.py):
queries within the model rules of driver_queries.py, and just outside them, over tables of edge values.

Every query is a pure function of its seed (`model(seed)`, `data_test(seed)`), so a failure is re-run from
the seed it prints. The tables are made by `tables()`: `fz.edge` holds the extremes of each type the rules
admit, `fz.calm` values whose sums fit, `fz.dim` a dimension joined on `k`; `fz.v_calm` is a dbt view over
`fz.calm`, `fz.v_dup` one whose columns repeat a name (Spark refuses every read of it)."""
from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Dict, List

LONG_MAX, LONG_MIN = 2**63 - 1, -2**63
INT_MAX, INT_MIN = 2**31 - 1, -2**31

WHOLE = {"b": "byte", "s": "short", "i": "int", "l": "long"}
NUMERIC = [*WHOLE, "d"]
TABLES = ("edge", "calm", "v_calm")
# the columns of each relation the generator may read (v_calm names `i` as `i2`, twice the value)
COLUMNS = {
    "edge": ["id", "k", "b", "s", "i", "l", "d", "dec", "str", "day", "flag"],
    "calm": ["id", "k", "b", "s", "i", "l", "d", "dec", "str", "day", "flag"],
    "v_calm": ["id", "k", "i2", "l", "str", "flag"],
}
KIND = {"id": "whole", "k": "whole", "b": "whole", "s": "whole", "i": "whole", "i2": "whole", "l": "whole",
        "d": "double", "dec": "decimal", "str": "string", "day": "date", "flag": "boolean"}


def tables() -> Dict[str, "object"]:
    """name -> pyarrow table, for fz.<name>."""
    import pyarrow as pa

    def table(rows: List[dict]) -> "pa.Table":
        types = {"id": pa.int64(), "k": pa.int32(), "b": pa.int8(), "s": pa.int16(), "i": pa.int32(),
                 "l": pa.int64(), "d": pa.float64(), "dec": pa.decimal128(10, 2), "str": pa.string(),
                 "day": pa.date32(), "flag": pa.bool_()}
        return pa.table({c: pa.array([r.get(c) for r in rows], t) for c, t in types.items()})

    nan, inf = float("nan"), float("inf")
    edge = [
        dict(id=1, k=1, b=127, s=32767, i=INT_MAX, l=LONG_MAX, d=nan, dec=Decimal("99999999.99"), str="a ",
             day=dt.date(1, 1, 1), flag=True),
        dict(id=2, k=2, b=-128, s=-32768, i=INT_MIN, l=LONG_MIN, d=-0.0, dec=Decimal("-0.01"), str="A",
             day=dt.date(9999, 12, 31), flag=False),
        dict(id=3, k=None, b=0, s=0, i=0, l=0, d=inf, dec=Decimal("0"), str="", day=dt.date(1970, 1, 1)),
        dict(id=4, k=3, b=1, s=-1, i=1, l=LONG_MAX, d=-inf, dec=None, str=None, day=None, flag=None),
        dict(id=5, k=2, b=None, s=None, i=None, l=None, d=None, dec=Decimal("1.50"), str="ß", flag=True),
        dict(id=6, k=1, b=-1, s=2, i=-7, l=-1, d=1e308, dec=Decimal("2.25"), str="b\\n", day=dt.date(2026, 3, 1),
             flag=False),
        dict(id=7, k=4, b=100, s=300, i=INT_MAX, l=LONG_MAX // 2 + 1, d=0.0, dec=Decimal("-3"), str="a",
             day=dt.date(2026, 3, 1), flag=True),
    ]
    calm = [dict(id=i, k=(i % 4) or None, b=(i * 7) % 50 - 20, s=i * 101 - 400, i=i * 1000 - 3500,
                 l=i * 10**9 - 4 * 10**9, d=[0.5, -0.0, 1.25, 3.0, -2.5][i % 5], dec=Decimal(i * 25) / 100,
                 str=["x", "y", "Z", None, "x "][i % 5], day=dt.date(2026, 1, i), flag=[True, False, None][i % 3])
            for i in range(1, 9)]
    dim = pa.table({"k": pa.array([1, 2, 3, 5, None], pa.int32()), "name": ["one", "two", None, "five", "none"],
                    "w": pa.array([10, -20, 30, 40, 50], pa.int64())})
    return {"edge": table(edge), "calm": table(calm), "dim": dim}


NEW_ROWS = [dict(id=9, k=5, b=3, s=4, i=5, l=6, d=2.0, dec=Decimal("4.00"), str="new", day=dt.date(2026, 2, 2),
                 flag=True)]  # appended between the two rounds


VIEWS = {
    "v_calm": "select id, k, i * 2 as i2, l, str, flag from `fz.calm` where id <= 6",
    "v_dup": "select * from `fz.calm` c join `fz.dim` d on c.k = d.k",
}


class _Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def pick(self, items):
        return self.r.choice(list(items))

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    # ---- values -------------------------------------------------------------------------------------
    def int_literal(self) -> str:
        return str(self.pick([0, 1, 2, 3, 7, -3, 100, 12345, INT_MAX]))

    def number(self, alias: str, table: str, depth: int = 0) -> str:
        cols = [c for c in COLUMNS[table] if KIND[c] in ("whole", "double")]
        roll = self.r.random()
        if depth >= 2 or roll < 0.35:
            return f"{alias}.{self.pick(cols)}"
        if roll < 0.45:
            return self.int_literal()
        if roll < 0.65:
            op = self.pick("+-*")
            return f"({self.number(alias, table, depth + 1)} {op} {self.number(alias, table, depth + 1)})"
        if roll < 0.72:
            return f"-{self.number(alias, table, depth + 1)}"
        if roll < 0.8:
            return f"{self.number(alias, table, depth + 1)} / {self.pick(['1', '2', '3', '-1', '0'])}"
        if roll < 0.88:
            dividend = self.pick([f"{alias}.{self.pick(cols)}", self.int_literal(), "(-3)", "-3"])
            return f"{dividend} / {self.pick(['100.0', '10.00', '1.000', '1.0', '10.0'])}"
        if roll < 0.94:
            return (f"case when {self.condition(alias, table, depth + 1)} then {self.number(alias, table, depth + 1)} "
                    f"else {self.number(alias, table, depth + 1)} end")
        return f"coalesce({self.number(alias, table, depth + 1)}, {self.number(alias, table, depth + 1)})"

    def condition(self, alias: str, table: str, depth: int = 0) -> str:
        roll = self.r.random()
        if depth < 2 and roll < 0.15:
            return f"({self.condition(alias, table, depth + 1)} {self.pick(['and', 'or'])} " \
                   f"{self.condition(alias, table, depth + 1)})"
        if depth < 2 and roll < 0.2:
            return f"not {self.condition(alias, table, depth + 1)}"
        column = self.pick(COLUMNS[table])
        kind = KIND[column]
        ref = f"{alias}.{column}"
        if self.chance(0.2):
            return f"{ref} is {self.pick(['', 'not '])}null"
        op = self.pick(["=", "<>", "<", "<=", ">", ">="])
        if kind == "whole":
            if self.chance(0.2):
                return f"{ref} in ({', '.join(self.int_literal() for _ in range(self.r.randint(1, 3)))}, null)"
            return f"{ref} {op} {self.int_literal()}"
        if kind == "string":
            value = self.pick(["'a'", "'a '", "'A'", "''", "'x'", "'ß'"])
            if self.chance(0.3):
                return f"{self.pick(['upper', 'lower'])}({ref}) {op} {value}"
            return f"{ref} {op} {value}"
        if kind == "boolean":
            return self.pick([ref, f"{ref} = true", f"not {ref}"])
        if kind == "date":
            return f"{ref} {op} date'2026-03-01'"  # outside the rules (a typed literal)
        if kind == "decimal":
            return f"{ref} {op} {self.pick(['0', '1', '2'])}"
        return f"{ref} {op} 0"  # a double compared: outside the rules

    def aggregate(self, alias: str, table: str) -> str:
        inner = self.number(alias, table, 1)
        agg = self.pick(["sum", "sum", "sum", "count", "min", "max", "count_distinct", "count_star"])
        if agg == "count_star":
            value = "count(*)"
        elif agg == "count_distinct":
            value = f"count(distinct {alias}.{self.pick(COLUMNS[table])})"
        else:
            value = f"{agg}({inner})"
        wrap = self.pick(["", "", " + 1 - 1", " * 2 / 2", " / 3", " / 100.0", " * 2"])
        return f"{value}{wrap}" if not wrap else f"({value}{wrap})"

    def outside(self, alias: str, table: str) -> str:
        """An expression outside the rules (Spark must build the model)."""
        col = f"{alias}.{self.pick(COLUMNS[table])}"
        return self.pick([f"cast({col} as string)", f"length({alias}.str)", f"abs({alias}.i)",
                          f"avg({alias}.i)", f"{alias}.d / {alias}.i", f"round({alias}.d, 1)", f"{alias}.dec * 2",
                          f"concat({alias}.str, 'x')", f"{alias}.i % 3", f"{alias}.l / {alias}.i"])

    # ---- queries ------------------------------------------------------------------------------------
    def projections(self, alias: str, table: str, aggregate: bool, n: int) -> List[str]:
        out = []
        for j in range(n):
            if self.chance(0.04):
                expr = self.outside(alias, table)
            elif aggregate:
                expr = self.aggregate(alias, table)
            elif self.chance(0.3):
                expr = f"{alias}.{self.pick(COLUMNS[table])}"
            elif self.chance(0.1):
                expr = f"{self.pick(['upper', 'lower'])}({alias}.str)"
            else:
                expr = self.number(alias, table)
            name = f"c{j}"
            if self.chance(0.03):
                name = "C0" if j else "c1"  # a name repeated ignoring case, sometimes
            out.append(expr if (self.chance(0.05) and "." in expr and " " not in expr) else f"{expr} as {name}")
        return out

    def select(self) -> str:
        table = self.pick(TABLES)
        alias = "t"
        shape = self.r.random()
        n = self.r.randint(1, 3)
        where = f" where {self.condition(alias, table)}" if self.chance(0.4) else ""
        source = f"fz.{table} {alias}"
        if shape < 0.35:
            sql = f"select {', '.join(self.projections(alias, table, False, n))} from {source}{where}"
        elif shape < 0.6:
            key = self.pick([c for c in COLUMNS[table] if KIND[c] in ("whole", "string", "boolean", "date")])
            having = f" having {self.aggregate(alias, table)} > {self.int_literal()}" if self.chance(0.3) else ""
            sql = (f"select {alias}.{key} as g, {', '.join(self.projections(alias, table, True, n))} from {source}"
                   f"{where} group by {alias}.{key}{having}")
        elif shape < 0.75:
            sql = f"select {', '.join(self.projections(alias, table, True, n))} from {source}{where}"
        elif shape < 0.9:
            side = self.pick(["", "left "])
            cols = self.projections(alias, table, False, n)
            sql = (f"select {', '.join(cols)}, d.name as dn, d.w as dw from {source} {side}join fz.dim d "
                   f"on {alias}.k = d.k{where}")
        else:
            sql = self.pick([
                "select * from fz.calm c join fz.dim d on c.k = d.k",
                "select c.k, d.k from fz.calm c join fz.dim d on c.k = d.k",
                "select * from fz.v_dup",
                "select k, name from fz.v_dup",
                "select c.*, d.name from fz.calm c left join fz.dim d on c.k = d.k",
            ])
        if self.chance(0.2):
            wrapped = self.pick(["cte", "subquery"])
            sql = f"with q as ({sql}) select * from q" if wrapped == "cte" else f"select * from ({sql}) q"
        if self.chance(0.05):
            sql += " limit 3"
        return sql


def model(seed: int) -> str:
    """A model's SQL."""
    return _Gen(seed).select()


def data_test(seed: int) -> str:
    """A data test's SQL (the rows that fail it), in the shapes dbt's generic tests and singular tests take."""
    g = _Gen(seed)
    table = g.pick(TABLES)
    column = g.pick(COLUMNS[table])
    shape = g.r.random()
    if shape < 0.2:
        return f"select {column} from fz.{table} where {column} is null"
    if shape < 0.35:
        return (f"select {column} as unique_field, count(*) as n_records from fz.{table} where {column} is not null "
                f"group by {column} having count(*) > 1")
    if shape < 0.45:
        return (f"with all_values as (select str as value_field, count(*) as n_records from fz.{table} "
                f"group by str) select * from all_values where value_field not in ('a', 'x', 'A')")
    if shape < 0.55:
        return (f"with child as (select k as from_field from fz.{table} where k is not null), parent as "
                f"(select k as to_field from fz.dim) select from_field from child left join parent "
                f"on child.from_field = parent.to_field where parent.to_field is null")
    if shape < 0.86:
        return f"select * from fz.{table} t where {g.condition('t', table)}"
    if shape < 0.9:  # over a view Spark cannot read (its columns repeat a name)
        return g.pick(["select k from fz.v_dup where name is null", "select * from fz.v_dup where w > 0",
                       "select c.k from (select * from fz.calm a join fz.dim b on a.k = b.k) c where c.k = 1"])
    return g.select()  # a singular test as a model's query
