"""INSERT / UPDATE / DELETE statements on warehouse tables, for hooks, `dbt run-operation`, custom
incremental strategies and tests.

Spark cannot run DML on a temporary view, so these statements are parsed here (sqlglot's Spark dialect)
and turned into one Delta commit each through the engine's Spark operations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from dbt.adapters.deltalog.warehouse import Warehouse
from deltalog import identity
from deltalog.lazy_imports import load


@dataclass(frozen=True)
class Dml:
    """An INSERT / DELETE / UPDATE on `schema.name`, as sqlglot parsed it (its parts back as Spark SQL)."""
    kind: str                                   # insert | delete | update
    schema: str
    name: str
    overwrite: bool = False                     # INSERT OVERWRITE
    columns: Optional[Tuple[str, ...]] = None   # INSERT's column list
    query: Optional[str] = None                 # INSERT's rows: SELECT, VALUES or WITH ... SELECT
    alias: Optional[str] = None                 # DELETE's alias of the table
    assignments: Tuple[Tuple[str, str], ...] = ()  # UPDATE's (column, SQL)
    where: Optional[str] = None

    @property
    def view(self) -> str:
        return f"`{self.schema}.{self.name}`"


def parse_dml(sql: str) -> Optional[Dml]:
    """`sql` as a Dml when it is INSERT / DELETE / UPDATE on a two-part name written as one quoted part
    (`schema.name`, as the SQL gateway writes warehouse relations), else None."""
    load("sqlglot")
    import sqlglot
    from sqlglot import exp

    from deltalog.sql import spark_dialect

    dialect = spark_dialect()
    try:
        node = sqlglot.parse_one(sql, dialect=dialect)
    except Exception:  # not SQL sqlglot reads: Spark will say what is wrong
        return None
    if not isinstance(node, (exp.Insert, exp.Delete, exp.Update)):
        return None
    target = node.this
    columns = None
    if isinstance(target, exp.Schema):  # INSERT INTO t (a, b)
        columns = tuple(c.name for c in target.expressions)
        target = target.this
    if not isinstance(target, exp.Table) or target.args.get("db") is not None or target.name.count(".") not in (1, 2):
        return None
    schema, name = target.name.split(".", 1)  # `catalog.schema.name`: Warehouse.resolve reads it
    alias = target.alias or None
    if alias:  # the engine's predicates name the table's columns bare: `o.note` is `note` (not inside a
        # subquery, where a bare name could mean the subquery's own column: that stays for Spark to refuse)
        node = node.transform(lambda n: exp.column(n.name, quoted=n.this.quoted)
                              if isinstance(n, exp.Column) and n.table == alias and not n.args.get("db")
                              and n.find_ancestor(exp.Select) is None else n)
    where = node.args.get("where")
    where_sql = where.this.sql(dialect=dialect) if where is not None else None
    if isinstance(node, exp.Insert):
        if node.expression is None:
            return None
        return Dml("insert", schema, name, overwrite=bool(node.args.get("overwrite")), columns=columns,
                   query=node.expression.sql(dialect=dialect))
    if isinstance(node, exp.Delete):
        return Dml("delete", schema, name, alias=alias, where=where_sql)
    assignments = tuple((eq.this.name, eq.expression.sql(dialect=dialect)) for eq in node.expressions)
    return Dml("update", schema, name, assignments=assignments, where=where_sql)


def _inserted_rows(df, cols: Optional[Tuple[str, ...]], columns: List[str], types: Dict[str, str], view: str,
                   filled: frozenset = frozenset()):
    """An INSERT's rows in the table's columns and types: columns it does not name are NULL, except
    those the writer fills in (`filled`: generated, default and identity columns), left out for it."""
    if not cols:
        positional = [c for c in columns if c.lower() not in filled]
        cols = (columns if len(df.columns) == len(columns) else positional)[: len(df.columns)]
    cols = list(cols)
    if len(cols) != len(df.columns):
        raise ValueError(f"INSERT into {view}: {len(df.columns)} values for {len(cols)} columns {cols}")
    df = df.toDF(*cols)
    exprs = []
    for name in columns:
        match = [c for c in cols if c.lower() == name.lower()]
        if not match and name.lower() in filled:
            continue
        src = f"`{match[0]}`" if match else "null"
        exprs.append(f"cast({src} as {types[name.lower()]}) as `{name}`")
    return df.selectExpr(*exprs)


def _updated_columns(assignments: Dict[str, str], where: str, columns: List[str], types: Dict[str, str],
                     view: str, generated: frozenset = frozenset()) -> List[str]:
    """An UPDATE's select list: each assigned column takes its new value where `where` holds; a generated
    column it does not assign is left out, for the writer to compute from the new values."""
    assignments = {col.lower(): expr for col, expr in assignments.items()}
    unknown = set(assignments) - set(types)
    if unknown:
        raise ValueError(f"UPDATE {view}: no column(s) {sorted(unknown)}; columns are {columns}")
    return [f"`{n}`" if n.lower() not in assignments else
            f"cast(case when ({where}) then ({assignments[n.lower()]}) else `{n}` end as {types[n.lower()]}) as `{n}`"
            for n in columns if n.lower() in assignments or n.lower() not in generated]


def _declared(table) -> Tuple[frozenset, frozenset]:
    """The table's columns the writer fills in when a write leaves them out (generated, default, identity),
    and its generated columns (lower case)."""
    from deltalog.generated_columns import generated_columns
    from deltalog.spark.writer import filled_by_writer

    schema = table.snapshot().schema_json
    return (frozenset(filled_by_writer(schema, table.uri, identity_too=True)),
            frozenset(g.name.lower() for g in generated_columns(schema)))


def try_execute_dml(spark, warehouse: Warehouse, sql: str, commit_info: Optional[Dict] = None):
    """Run `sql` as a Delta commit when it is DML on a warehouse table; returns the new version
    (or None when nothing changed), or the string "not-dml" when the statement is something else."""
    from deltalog.spark import operations

    dml = parse_dml(sql)
    if dml is None:
        return "not-dml"
    holder, schema, name = warehouse.resolve(dml.schema, dml.name)
    if not holder.is_table(schema, name):
        return "not-dml"
    table = holder.table(schema, name)
    target = spark.table(dml.view)
    types = {f.name.lower(): f.dataType.simpleString() for f in target.schema.fields}

    if dml.kind == "delete":
        return operations.delete(spark, table, dml.where or "true", extra_commit_info=commit_info)

    filled, generated = _declared(table)
    if dml.kind == "insert":
        df = _inserted_rows(spark.sql(dml.query), dml.columns, target.columns, types, dml.view, filled)
        return operations.write_dataframe(df, table, mode="overwrite" if dml.overwrite else "append",
                                          operation="WRITE", extra_commit_info=commit_info)

    # UPDATE: rewrite the table with the assignments applied where the predicate holds (its rows keep
    # their identity values; generated columns are computed again from the new values)
    where = dml.where or "true"
    identity.refuse_updates(table.snapshot().schema_json, (c for c, _ in dml.assignments), dml.view)
    exprs = _updated_columns(dict(dml.assignments), where, target.columns, types, dml.view, generated)
    df = spark.sql(f"select {', '.join(exprs)} from {dml.view}")
    return operations.write_dataframe(
        df, table, mode="overwrite", operation="UPDATE",
        operation_parameters={"predicate": where}, extra_commit_info=commit_info, own_rows=True,
    )


class TargetRows:
    """What a script of INSERT / DELETE / UPDATE statements on one table makes of its rows, as one lazy
    DataFrame: `rows` (the table's current rows, changed statement by statement) and whether any
    statement did more than insert (`rewrites`). The caller commits the outcome at once: every
    statement lands in one commit, or none does."""

    def __init__(self, spark, table_view: str, target_df, schema_json: Optional[Dict] = None):
        from deltalog.column_defaults import column_defaults
        from deltalog.generated_columns import generated_columns
        from deltalog.identity import identity_columns

        self.spark = spark
        self.view = table_view
        self.schema_json = schema_json
        self.columns = list(target_df.columns)
        self.types = {f.name.lower(): f.dataType.simpleString() for f in target_df.schema.fields}
        # what the writer would fill in, computed here: every statement sees whole rows
        self.generated = {g.name.lower(): g.expression for g in generated_columns(schema_json)}
        self.defaults = {d.name.lower(): d.expression for d in column_defaults(schema_json)}
        self.identity = {c.name.lower(): c for c in identity_columns(schema_json, table_view)}
        self.rows = target_df
        self.inserted = None  # rows of INSERT INTO statements before any other statement
        self.rewrites = False
        self._step = 0
        self._views: List[str] = []

    def _as_view(self, df) -> str:
        self._step += 1
        name = f"__deltalog_script_{id(self)}_{self._step}"
        df.createOrReplaceTempView(name)
        self._views.append(name)
        return f"`{name}`"

    def close(self) -> None:
        for name in self._views:
            self.spark.catalog.dropTempView(name)
        self._views.clear()

    def apply(self, dml: Dml) -> None:
        # each statement sees the table as the statements before it left it, as SQL would
        current = self._as_view(self.rows)

        def text(value: Optional[str]) -> Optional[str]:
            return value.replace(self.view, current) if value is not None else None

        if dml.kind == "insert":
            df = self._whole(_inserted_rows(self.spark.sql(text(dml.query)), dml.columns, self.columns, self.types,
                                            self.view, frozenset(self.generated) | frozenset(self.defaults)),
                             inserting=True)
            if dml.overwrite:
                self.rows, self.rewrites = df, True
                return
            self.rows = self.rows.unionByName(df)
            if not self.rewrites:
                self.inserted = df if self.inserted is None else self.inserted.unionByName(df)
            return
        self.rewrites = True
        where = text(dml.where) or "true"
        if dml.kind == "delete":
            self.rows = self.spark.sql(f"select * from {current} {dml.alias or ''} where not coalesce(({where}), false)")
            return
        assignments = {col: text(expr) for col, expr in dml.assignments}
        identity.refuse_updates(self.schema_json, assignments, self.view)
        exprs = _updated_columns(assignments, where, self.columns, self.types, self.view, frozenset(self.generated))
        self.rows = self._whole(self.spark.sql(f"select {', '.join(exprs)} from {current}"))

    def _whole(self, df, inserting: bool = False):
        """`df` with the columns it leaves out that the writer would fill in: defaults and generated
        columns computed here. An identity column a script's INSERT leaves out, or gives when it is
        `generated always`, is refused: a script's rows are committed as given."""
        have = {c.lower() for c in df.columns}
        for name, column in self.identity.items() if inserting else ():
            if name not in have or not column.allow_explicit_insert:
                raise ValueError(
                    f"{self.view}: column '{column.name}' is an identity column; a script of several statements "
                    f"commits its rows as given, so it cannot number new rows. Run that INSERT as a statement "
                    f"of its own (each new row then gets the next value)")
        exprs = []
        for name in self.columns:
            low = name.lower()
            if low in have:
                exprs.append(f"`{name}`")
            elif low in self.defaults:
                exprs.append(f"cast(({self.defaults[low]}) as {self.types[low]}) as `{name}`")
        df = df.selectExpr(*exprs)
        if any(low not in have for low in self.generated):
            df = df.selectExpr(*[f"cast(({self.generated[n.lower()]}) as {self.types[n.lower()]}) as `{n}`"
                                 if n.lower() in self.generated and n.lower() not in have else f"`{n}`"
                                 for n in self.columns])
        return df
