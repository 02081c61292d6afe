"""Small data tests answered in this process, without a Spark job.

A data test counts failing rows. On a dev loop's tables (seeds, staging views, small marts) Spark spends
0.1-0.5 s per test planning and scheduling a job over a few kilobytes. When a test's query is built only
from constructs that mean the same in Spark SQL and in DuckDB, over warehouse tables and dbt views whose
live files total at most `MAX_BYTES`, the tables' live rows are read with pyarrow (deletion vectors
applied: `deltalog.scan`; only the columns the query reads) and DuckDB runs the query. Anything else goes to Spark as before, and `answer`
says why not.

What counts as the same (checked on the query after dbt views are inlined and the columns nobody reads
are pruned, so an unused expression of a view does not matter): SELECT with FROM, WHERE, GROUP BY,
HAVING, LIMIT n, WITH, subqueries and [LEFT] JOIN ... ON; columns, string / whole-number / boolean
literals; = <> < <= > >=, IN (...), IS [NOT] NULL, AND, OR, NOT; count, min, max. Comparisons and IN
lists only between values of one kind (whole numbers and decimals, strings, booleans, dates, or one
timestamp type), and floating-point values are never compared, grouped, joined on or made distinct
(NaN and -0.0 are where engines differ). upper() and lower() of strings (a value beyond ASCII sends the
query to Spark: the engines map such letters differently), and a whole number divided by a decimal power
of ten (`amount / 100.0`: an exact decimal in both). No other function calls, arithmetic, casts, CASE,
ORDER BY, window functions, time travel or relations outside the warehouse."""
from __future__ import annotations

import atexit
import contextlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from deltalog.lazy_imports import load

load("sqlglot")  # this module is first imported by whichever thread answers a data test
import sqlglot  # noqa: E402
from sqlglot import exp  # noqa: E402
from sqlglot.errors import SqlglotError  # noqa: E402

MAX_BYTES = 64 << 20  # the live Parquet files one query may read here, summed over its tables
_CACHE_BYTES = 256 << 20  # columns kept in memory between tests, by table, version, table id and columns
_VIEW_DEPTH = 20
_PREFIX = "__deltalog_t"  # the names the tables are registered under in DuckDB


@dataclass
class Answer:
    columns: List[Tuple[str, str]]  # (name, DuckDB type)
    rows: List[tuple]
    tables: List[str]  # `schema.table@version` of what was read


class NotHere(Exception):
    """Why a query goes to Spark instead."""


Relations = List[Tuple[Optional[str], str, str]]  # (catalog, schema, name) of warehouse relations
# How the SQL gateway reads a statement: (its text with warehouse relations named by their session views,
# the relations it names). Given by the gateway, which calls this module.
ReadSql = Callable[[Any, str], Tuple[str, Relations]]


def answer(warehouse: Any, sql: str, relations: Relations, read_sql: ReadSql) -> Answer:
    """Run `sql` (as the SQL gateway rewrote it, naming `relations`) with DuckDB over the tables' rows;
    NotHere says why it cannot be. `read_sql` reads a dbt view's SQL the same way."""
    _, checked, inputs = _prepared(warehouse, sql, relations, read_sql, model=False)
    inputs.read(_columns_read(checked))
    return _run(checked.sql(dialect="duckdb"), inputs)


def model_query(warehouse: Any, sql: str, relations: Relations, read_sql: ReadSql) -> "ModelQuery":
    """A small model's or a view's query checked under the model rules (small_models.py; NotHere says why
    not)."""
    return ModelQuery(*_prepared(warehouse, sql, relations, read_sql, model=True))


@dataclass
class ModelQuery:
    inlined: Any  # the query with its relations inlined, before qualification: its names as written
    checked: Any
    inputs: "_Inputs"

    def run(self) -> Tuple[Any, List[str]]:
        """Its result as an Arrow table (DuckDB's types) and `schema.table@version` of what it read."""
        self.inputs.read(_columns_read(self.checked))
        return _run_arrow(self.checked.sql(dialect="duckdb"), self.inputs), self.inputs.labels

    def delta_schema(self) -> dict:
        """The Delta schema Spark's analysis would give its result (spark_analysis.py)."""
        from dbt.adapters.deltalog import spark_analysis

        schemas = {registered: snapshot.schema_json for registered, snapshot in self.inputs.snapshots.items()}
        try:
            names = spark_analysis.output_names(self.inlined, self.inputs.schema)
            return spark_analysis.delta_schema(self.checked, schemas, names)
        except spark_analysis.NotHere as why:
            raise NotHere(str(why)) from None

    def columns(self) -> List[str]:
        """Its output column names as Spark's analysis gives them, once DuckDB has bound the query over
        empty tables of its inputs' schemas (a column, a type or a GROUP BY it cannot resolve is NotHere)."""
        from dbt.adapters.deltalog import spark_analysis

        try:
            names = spark_analysis.output_names(self.inlined, self.inputs.schema)
        except spark_analysis.NotHere as why:
            raise NotHere(str(why)) from None
        self.inputs.read(_columns_read(self.checked), empty=True)
        bound = _run_arrow(f"SELECT * FROM ({self.checked.sql(dialect='duckdb')}) LIMIT 0", self.inputs)
        if bound.num_columns != len(names):
            raise NotHere(f"DuckDB found {bound.num_columns} columns, {len(names)} names")
        return names


# The versions the differential fuzz against Spark (tests/functional/test_in_process_is_spark.py) ran on,
# as pyproject.toml pins them: a new release of either can change a result without a word, so under any
# other the path refuses and Spark answers.
PROVEN = {"duckdb": ((2, 0), (2, 1)), "sqlglot": ((30, 31), (31, 0))}
_unproven: Optional[str] = None


def _versions_refusal() -> Optional[str]:
    global _unproven
    if _unproven is None:
        from importlib.metadata import version

        _unproven = ""
        for package, (low, high) in PROVEN.items():
            have = version(package)
            numbers = tuple(int(part) for part in re.findall(r"\d+", have)[:2])
            if not low <= numbers < high:
                _unproven = (f"{package} {have} is not a version the in-process path was proven on (from "
                             f"{'.'.join(map(str, low))} to before {'.'.join(map(str, high))})")
    return _unproven or None


def _prepared(warehouse: Any, sql: str, relations: Relations, read_sql: ReadSql,
              model: bool) -> Tuple[Any, Any, "_Inputs"]:
    unproven = _versions_refusal()
    if unproven:
        raise NotHere(unproven)
    tree = _parsed(sql, "the query")
    inputs = _Inputs()
    tree = _inline(tree, warehouse, relations, read_sql, inputs, 0)
    if inputs.total_bytes > MAX_BYTES:
        raise NotHere(f"its tables hold {inputs.total_bytes} bytes of Parquet, more than {MAX_BYTES}")
    inlined = tree.copy() if model else None
    return inlined, _checked(tree, inputs.schema, model), inputs


def _columns_read(tree: Any) -> Dict[str, set]:
    """The columns the query reads of each registered table (lower-cased, as sqlglot qualified them)."""
    registered = {t.alias_or_name: t.name for t in tree.find_all(exp.Table) if t.name.startswith(_PREFIX)}
    read: Dict[str, set] = {name: set() for name in registered.values()}
    for column in tree.find_all(exp.Column):
        if column.table in registered:
            read[registered[column.table]].add(column.name.lower())
    return read


class _Inputs:
    """The tables a query reads: their registered names, Arrow rows and column types."""

    def __init__(self) -> None:
        self.snapshots: Dict[str, Any] = {}  # registered name -> Snapshot
        self.tables: Dict[str, Any] = {}  # registered name -> pyarrow Table (of the columns read)
        self.schema: Dict[str, Dict[str, str]] = {}  # registered name -> column -> sqlglot type
        self.labels: List[str] = []
        self.total_bytes = 0
        self._by_path: Dict[str, str] = {}

    def add(self, warehouse: Any, schema: str, name: str) -> str:
        path = warehouse.table_path(schema, name)
        if path in self._by_path:
            return self._by_path[path]
        from deltalog.errors import DeltaError
        from deltalog.snapshot_reuse import latest_snapshot

        try:
            snapshot = latest_snapshot(warehouse.table(schema, name))
            self.total_bytes += snapshot.size_bytes
            if self.total_bytes > MAX_BYTES:
                raise NotHere(f"{schema}.{name} and the query's other tables hold more than {MAX_BYTES} bytes")
            registered = f"{_PREFIX}{len(self.snapshots)}"
            self.schema[registered] = _column_types(snapshot.schema_json, f"{schema}.{name}")
            self.snapshots[registered] = snapshot
        except (DeltaError, OSError) as exc:  # Spark's route reads it, or says what is wrong
            raise NotHere(f"{schema}.{name} is not read here: {exc}") from None
        self.labels.append(f"{schema}.{name}@v{snapshot.version}")
        self._by_path[path] = registered
        return registered

    def read(self, columns: Dict[str, set], empty: bool = False) -> None:
        """Read the live rows of the columns the query reads (one column at least: count(*) needs the
        rows); `empty`: none of them, only the columns' types."""
        from deltalog.errors import DeltaError
        from deltalog.schema import to_arrow_schema

        for registered, snapshot in self.snapshots.items():
            names = [f["name"] for f in snapshot.schema_json["fields"]]
            wanted = [n for n in names if n.lower() in columns.get(registered, ())] or names[:1]
            try:
                if empty:
                    schema = to_arrow_schema({**snapshot.schema_json, "fields": [
                        f for f in snapshot.schema_json["fields"] if f["name"] in wanted]})
                    self.tables[registered] = schema.empty_table()
                    continue
                self.tables[registered] = _rows(snapshot, wanted)
            except (DeltaError, OSError) as exc:
                raise NotHere(f"{snapshot.table_uri} is not read here: {exc}") from None


def _inline(tree: Any, warehouse: Any, relations: Relations, read_sql: ReadSql, inputs: _Inputs,
            depth: int) -> Any:
    """`tree` with each warehouse table named as a registered input and each dbt view as its SQL."""
    if depth > _VIEW_DEPTH:
        raise NotHere(f"views nested more than {_VIEW_DEPTH} deep")
    named = {}
    for catalog, schema, name in relations:
        holder = warehouse.of(catalog)
        named[holder.view_name(schema, name)] = (holder, schema, name)
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if table.args.get("db") or table.args.get("catalog"):
            raise NotHere(f"{table.sql(dialect='spark')} is not a relation of the warehouse")
        if table.args.get("version") or table.args.get("when"):
            raise NotHere(f"{table.name} is read as of a version or time")  # answered here, it would read the latest
        if table.name in ctes:
            continue
        if table.name not in named:
            raise NotHere(f"{table.name} is not a relation of the warehouse")
        holder, schema, name = named[table.name]
        alias = exp.TableAlias(this=exp.to_identifier(table.alias_or_name, quoted=True))
        if holder.is_table(schema, name):
            registered = inputs.add(holder, schema, name)
            table.replace(exp.Table(this=exp.to_identifier(registered, quoted=True), alias=alias))
            continue
        view_sql = holder.read_view_sql(schema, name)
        if view_sql is None:
            raise NotHere(f"{schema}.{name} is neither a table nor a view of the warehouse")
        view_text, view_relations = read_sql(holder, view_sql)
        view = _inline(_parsed(view_text, f"the view {schema}.{name}"), holder, view_relations, read_sql, inputs,
                       depth + 1)
        view.meta[_VIEW_BODY] = True  # analysed when the view was made: its unread columns do not matter
        table.replace(exp.Subquery(this=view, alias=alias))
    return tree


_VIEW_BODY = "deltalog_view_body"
# What may follow a comma in Spark's grammar is never one of these; sqlglot's parser lets a trailing comma
# pass (`select a, from t`), Spark's refuses it.
_NOT_AFTER_COMMA = {"FROM", "WHERE", "GROUP_BY", "HAVING", "ORDER_BY", "LIMIT", "R_PAREN", "UNION", "JOIN",
                    "SEMICOLON", "QUALIFY", "WINDOW", "CLUSTER_BY", "DISTRIBUTE_BY", "SORT_BY"}


def _parsed(sql: str, what: str) -> Any:
    """`sql` parsed as Spark SQL, where Spark's parser would take it too."""
    from sqlglot.dialects.dialect import Dialect

    try:
        toks = Dialect.get_or_raise("spark").tokenize(sql)
        for comma, following in zip(toks, [*toks[1:], None]):
            if comma.token_type.name == "COMMA" and (following is None or following.token_type.name in _NOT_AFTER_COMMA):
                raise NotHere(f"{what} has a comma before {following.text if following else 'its end'} (Spark's "
                              f"parser refuses it)")
        return sqlglot.parse_one(sql, read="spark")
    except SqlglotError as exc:
        raise NotHere(f"{what} is not parsed: {exc}") from None


# Delta's primitive types as sqlglot names them; any other column type keeps its table in Spark.
_TYPES = {"string": "VARCHAR", "long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT",
          "boolean": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMPTZ", "timestamp_ntz": "TIMESTAMP",
          "double": "DOUBLE", "float": "FLOAT"}


def _column_types(schema_json: Dict[str, Any], label: str) -> Dict[str, str]:
    out = {}
    for field in schema_json["fields"]:
        kind = field["type"]
        if isinstance(kind, str) and kind.startswith("decimal"):
            out[field["name"]] = kind.upper()
        elif isinstance(kind, str) and kind in _TYPES:
            out[field["name"]] = _TYPES[kind]
        else:
            raise NotHere(f"{label}.{field['name']} is of type {kind!r}")
    return out


def _checked(tree: Any, schema: Dict[str, Dict[str, str]], model: bool = False) -> Any:
    """The query qualified, its unread columns pruned and its types annotated, once every part of it
    is known to mean the same in both engines (`model`: with the model rules' arithmetic too)."""
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.pushdown_projections import pushdown_projections
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.schema import MappingSchema

    mapping = MappingSchema(schema, dialect="spark")
    try:
        tree = qualify(tree, schema=mapping, dialect="spark")
        _unique_names(tree)
        _unread_columns_analyse(tree, _MODEL_ALLOWED if model else _ALLOWED)
        tree = pushdown_projections(tree)
        tree = annotate_types(tree, schema=mapping, dialect="spark")
        wrappers = _exact_divisions(tree)
        if wrappers:  # their results are decimals now, and so is what reads them
            tree = annotate_types(tree, schema=mapping, dialect="spark")
    except SqlglotError as exc:
        raise NotHere(f"not resolved: {exc}") from None
    allowed = _MODEL_ALLOWED if model else _ALLOWED
    for node in tree.walk():
        if id(node) in wrappers:
            continue
        if type(node) not in allowed:
            raise NotHere(f"{type(node).__name__} ({node.sql(dialect='spark')[:80]})")
        if model:
            _model_rules(node)
        if isinstance(node, exp.Literal) and not node.is_string and not node.is_int:
            raise NotHere(f"the literal {node.sql(dialect='spark')} (only strings and whole numbers)")
        if isinstance(node, (exp.Where, exp.Having)):
            _boolean(node.this)
        elif isinstance(node, (exp.And, exp.Or)):
            _boolean(node.this)
            _boolean(node.expression)
        elif isinstance(node, exp.Not):
            _boolean(node.this)
        if isinstance(node, _COMPARISONS):
            _same_kind(node, [node.this, node.expression])
        elif isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise NotHere(f"IN over a subquery ({node.sql(dialect='spark')[:80]})")
            _same_kind(node, [node.this, *node.expressions])
        elif isinstance(node, exp.Join):
            if node.args.get("on") is not None:
                _boolean(node.args["on"])
            if node.side not in ("", "LEFT") or node.kind not in ("", "INNER", "OUTER") or not node.args.get("on") \
                    or node.args.get("using") or node.args.get("method"):
                raise NotHere(f"the join {node.sql(dialect='spark')[:80]} (only [LEFT] JOIN ... ON)")
        elif isinstance(node, exp.Group):
            for key in node.expressions:
                _not_float(node, key)
        elif isinstance(node, exp.Distinct):
            keys = node.expressions or (node.parent.expressions if isinstance(node.parent, exp.Select) else [])
            for key in keys:
                _not_float(node, key)
        elif isinstance(node, exp.Limit):
            if not (isinstance(node.expression, exp.Literal) and node.expression.is_int):
                raise NotHere("a LIMIT that is not a whole number")
        elif isinstance(node, exp.Select):
            for extra in ("order", "qualify", "windows", "laterals", "pivots", "sort", "cluster", "distribute"):
                if node.args.get(extra):
                    raise NotHere(f"{extra.upper()} in a SELECT")
        elif isinstance(node, (exp.Upper, exp.Lower)) and _kind(node.this) != "string":
            raise NotHere(f"{node.sql(dialect='spark')[:80]} of a value that is not a string")
    _ascii_case_mapping(tree)
    if model:
        _sums_within_bigint(tree)
    return tree


def _unread_columns_analyse(tree: Any, allowed: tuple) -> None:
    """The query's own columns (not a dbt view's, which were analysed when it was made) are checked here
    before the unread ones are pruned: Spark's analysis fails a query over any of them, read or not. Each
    is made of what the rules know, and in an aggregate, each column it names outside an aggregate is a
    GROUP BY key (else Spark's MISSING_AGGREGATION)."""
    for select in tree.find_all(exp.Select):
        if _in_view_body(select):
            continue
        grouped = select.args.get("group")
        keys = {key.sql() for key in grouped.expressions} if grouped else set()
        aggregate = grouped is not None or any(p.find(exp.AggFunc) for p in select.expressions)
        for projection in select.expressions:
            for node in projection.walk():
                if isinstance(node, exp.Select):
                    break
                if type(node) not in allowed:
                    raise NotHere(f"{type(node).__name__} ({node.sql(dialect='spark')[:80]})")
            if not aggregate:
                continue
            value = projection.this if isinstance(projection, exp.Alias) else projection
            if value.sql() in keys:
                continue
            for column in value.find_all(exp.Column):
                if column.sql() not in keys and not column.find_ancestor(exp.AggFunc):
                    raise NotHere(f"{column.sql(dialect='spark')[:80]} is neither grouped nor aggregated")


def _in_view_body(node: Any) -> bool:
    while node is not None:
        if _VIEW_BODY in (node.meta or {}):
            return True
        node = node.parent
    return False


def _unique_names(tree: Any) -> None:
    """A relation (a CTE, a subquery, an inlined view) whose columns repeat a name, ignoring case: Spark
    refuses it (COLUMN_ALREADY_EXISTS, AMBIGUOUS_REFERENCE) where DuckDB would take one of the columns."""
    for select in tree.find_all(exp.Select):
        seen: Dict[str, str] = {}
        for name in select.named_selects:
            if name.lower() in seen:
                raise NotHere(f"the column name {name!r} appears twice in {select.sql(dialect='spark')[:80]}")
            seen[name.lower()] = name


_LONG_MAX = 2**63 - 1


def _sums_within_bigint(tree: Any) -> None:
    """Spark sums whole numbers in a bigint and, in ANSI mode, fails at the first running total past
    its range, whichever order the rows come in; DuckDB sums them in 128 bits, so an overflow Spark
    raises would pass unseen into the arithmetic around the sum. Each sum is computed as a bigint here,
    and only when the sum of its values' magnitudes fits one (then no running total can overflow, in
    any order); otherwise DuckDB raises and the model goes to Spark. That check runs for each group
    DuckDB outputs: only the outermost SELECT's sums, without HAVING, are computed here."""
    T = exp.DataType.Type
    for node in list(tree.find_all(exp.Sum)):
        if _type(node.this) not in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT):
            continue
        if isinstance(node.this, exp.Distinct):
            raise NotHere(f"{node.sql(dialect='spark')[:80]}: a sum of distinct whole numbers")
        select = node.find_ancestor(exp.Select)
        if select is not tree or select.args.get("having"):
            # Spark adds up every group's; DuckDB checks only the groups whose sum it outputs
            raise NotHere(f"{node.sql(dialect='spark')[:80]}: a sum of whole numbers whose groups a HAVING or an "
                          f"outer query may leave out (Spark may fail on one of them)")
        magnitudes = exp.Sum(this=exp.Abs(this=exp.Cast(this=node.this.copy(), to=exp.DataType.build("INT128"))))
        refusal = exp.Anonymous(this="error", expressions=[exp.Literal.string("past a bigint: Spark decides")])
        checked = exp.Case(ifs=[exp.If(this=exp.GT(this=magnitudes, expression=exp.Literal.number(_LONG_MAX)),
                                       true=refusal)],
                           default=exp.Cast(this=node.copy(), to=exp.DataType.build("BIGINT")))
        checked.meta["whole_sum"] = True  # spark_analysis: a bigint
        node.replace(checked)


_POWER_OF_TEN = re.compile(r"10*\.0+")


def _exact_divisions(tree: Any) -> set:
    """A whole number divided by a decimal power of ten (`amount / 100.0`) is, in Spark, a decimal whose
    scale (at least 6, Spark's rule) holds the quotient exactly; DuckDB's `/` would give a double. Each is
    rewritten as DuckDB's exact decimal product (`CAST(amount AS DECIMAL(38, 0)) * 0.01`, cast to the
    quotient's scale). The ids of the nodes written around the dividend, which the rules leave alone."""
    T = exp.DataType.Type
    wrappers: set = set()
    for div in list(tree.find_all(exp.Div)):
        divisor = div.expression
        if not (isinstance(divisor, exp.Literal) and not divisor.is_string and _POWER_OF_TEN.fullmatch(divisor.this)):
            continue
        places = len(divisor.this.split(".")[0]) - 1
        if places > 6 or len(divisor.this.split(".")[1]) > 6 \
                or _type(div.this) not in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT):
            continue  # the rules refuse it as it is
        factor = exp.Literal.number("1" if places == 0 else f"0.{'0' * (places - 1)}1")
        whole = exp.Cast(this=div.this.copy(), to=exp.DataType.build("DECIMAL(38, 0)"))
        product = exp.Mul(this=whole, expression=factor)
        quotient = exp.Cast(this=product, to=exp.DataType.build(f"DECIMAL(38, {places})"))
        div.replace(quotient)
        quotient.meta["exact_division"] = (whole.this, divisor.this)  # for spark_analysis: Spark's type
        wrappers |= {id(quotient), id(product), id(whole), id(factor)}
        wrappers |= {id(n) for n in (*whole.to.walk(), *quotient.to.walk())}
    return wrappers


def _ascii_case_mapping(tree: Any) -> None:
    """upper() and lower() map ASCII letters alike in both engines; beyond ASCII (ß, dotted i, ...) Java's
    and DuckDB's case mappings differ, so DuckDB raises on such a value and the query goes to Spark."""
    for node in list(tree.find_all(exp.Upper, exp.Lower)):
        value = node.this
        ascii_only = exp.or_(exp.Is(this=value.copy(), expression=exp.Null()),
                             exp.EQ(this=exp.Anonymous(this="strlen", expressions=[value.copy()]),
                                    expression=exp.Length(this=value.copy())))
        refusal = exp.Anonymous(this="error", expressions=[exp.Literal.string("not ASCII: Spark maps its case")])
        node.replace(exp.Case(ifs=[exp.If(this=ascii_only, true=node.copy())], default=refusal))


_ALLOWED = (exp.Select, exp.From, exp.Where, exp.Group, exp.Having, exp.Join, exp.With, exp.CTE, exp.Subquery,
            exp.Limit, exp.Alias, exp.TableAlias, exp.Column, exp.Identifier, exp.Star, exp.Table, exp.Literal,
            exp.Boolean, exp.Null, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not,
            exp.Is, exp.In, exp.Paren, exp.Count, exp.Min, exp.Max, exp.Distinct, exp.Upper, exp.Lower)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
# A model's values are kept, not only counted: its rules add sums, CASE, COALESCE and arithmetic, on whole
# numbers and doubles only (decimal arithmetic's result types differ between the engines).
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Neg)
_MODEL_ALLOWED = _ALLOWED + (exp.Sum, exp.Case, exp.If, exp.Coalesce, exp.Div) + _ARITHMETIC


def _model_rules(node: Any) -> None:
    """What a model's query may compute here besides what a test's may."""
    T = exp.DataType.Type
    if isinstance(node, (exp.Min, exp.Max)) and _type(node.this) in (T.DOUBLE, T.FLOAT):
        raise NotHere(f"{node.sql(dialect='spark')[:80]} over floating-point values (NaN)")
    elif isinstance(node, exp.Sum):
        _number(node, node.this)
    elif isinstance(node, _ARITHMETIC):
        for operand in (node.this, node.args.get("expression")):
            if operand is not None:
                _number(node, operand)
    elif isinstance(node, exp.Div):
        # Spark's `/` is a double division, as DuckDB's; by zero Spark fails (ANSI) and DuckDB gives NULL
        divisor = node.expression
        _number(node, node.this)
        if not (isinstance(divisor, exp.Literal) and divisor.is_int and int(divisor.this) != 0):
            raise NotHere(f"{node.sql(dialect='spark')[:80]} divides by other than a nonzero whole-number literal")
    elif isinstance(node, exp.If):
        _boolean(node.this)
    elif isinstance(node, exp.Limit):  # which rows, and so which values fail, is each engine's own choice
        raise NotHere("a model with LIMIT")
    if isinstance(node, (exp.Case, exp.Coalesce)) or (isinstance(node, exp.If) and not isinstance(node.parent, exp.Case)):
        if isinstance(node, exp.Case) and node.this is not None:
            raise NotHere(f"CASE x WHEN ... ({node.sql(dialect='spark')[:80]}), only CASE WHEN")
        if isinstance(node, exp.Case):
            values = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
        elif isinstance(node, exp.If):  # if(c, a, b)
            values = [node.args.get("true"), node.args.get("false")]
        else:
            values = [node.this, *node.expressions]
        kinds = {_value_kind(v) for v in values if v is not None and not isinstance(v, exp.Null)}
        if len(kinds) > 1 or "" in kinds:
            raise NotHere(f"{node.sql(dialect='spark')[:80]} mixes {', '.join(sorted(k or 'other' for k in kinds))}")


def _type(node: Any) -> Any:
    return node.type.this if node is not None and node.type is not None else None


def _number(node: Any, operand: Any) -> None:
    T = exp.DataType.Type
    if _type(operand) not in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.DOUBLE):
        raise NotHere(f"{node.sql(dialect='spark')[:80]}: arithmetic on {operand.type} (whole numbers and "
                      f"doubles only)")


def _value_kind(node: Any) -> str:
    """The kind within which CASE and COALESCE branches coerce alike: numbers (whole or double) are one."""
    T = exp.DataType.Type
    if _type(node) in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.DOUBLE):
        return "number"
    return _kind(node)


def _kind(node: Any) -> str:
    """The kind of value within which Spark and DuckDB compare alike ("" when unknown or floating)."""
    t = node.type.this if node.type is not None else None
    T = exp.DataType.Type
    if t in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.DECIMAL):
        return "exact number"
    if t in (T.VARCHAR, T.TEXT, T.CHAR, T.NVARCHAR, T.NCHAR):
        return "string"
    if t in (T.BOOLEAN, T.DATE, T.TIMESTAMP, T.TIMESTAMPTZ):
        return t.value.lower()
    return ""


def _same_kind(node: Any, operands: List[Any]) -> None:
    kinds = {_kind(o) for o in operands}
    if len(kinds) != 1 or "" in kinds:
        raise NotHere(f"{node.sql(dialect='spark')[:80]} compares {', '.join(sorted(k or 'other' for k in kinds))}")


def _boolean(condition: Any) -> None:
    """A condition is a boolean: DuckDB would read a number as one, where Spark refuses the query."""
    if _kind(condition) != "boolean":
        raise NotHere(f"the condition {condition.sql(dialect='spark')[:80]} is not a boolean")


def _not_float(node: Any, key: Any) -> None:
    if key.type is None or key.type.this in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT,
                                              exp.DataType.Type.UNKNOWN):
        raise NotHere(f"{key.sql(dialect='spark')[:80]} is grouped or made distinct and is not of an exact kind")


def _run(sql: str, inputs: _Inputs) -> Answer:
    with _duckdb_over(inputs) as cursor:
        result = cursor.execute(sql)
        rows = result.fetchall()
        columns = [(d[0], str(d[1])) for d in result.description]
    return Answer(columns, rows, inputs.labels)


def _run_arrow(sql: str, inputs: _Inputs) -> Any:
    with _duckdb_over(inputs) as cursor:
        result = cursor.sql(sql)
        return (getattr(result, "to_arrow_table", None) or result.arrow)()  # DuckDB 2: to_arrow_table, 1.x: arrow


@contextlib.contextmanager
def _duckdb_over(inputs: _Inputs) -> Iterator[Any]:
    """A DuckDB cursor with the inputs' rows registered under their names; a DuckDB error (an overflow, or
    anything not expected of what passed the checks) is NotHere: Spark's route decides."""
    load("duckdb")
    import duckdb

    cursor = _duckdb_cursor()
    try:
        for registered, table in inputs.tables.items():
            cursor.register(registered, table)
        yield cursor
    except duckdb.Error as exc:
        raise NotHere(f"DuckDB did not run it: {exc}") from None
    finally:
        cursor.close()


_database = None
_database_lock = threading.Lock()


def _duckdb_cursor() -> Any:
    """A connection of its own (registered tables are its own) to the process's in-memory database: a
    new database costs 15 ms, a connection to one under 1 ms."""
    global _database
    load("duckdb")
    import duckdb

    with _database_lock:
        if _database is None:
            _database = duckdb.connect(":memory:", config={"threads": 1})
        return _database.cursor()


def warm_up() -> None:
    """Import DuckDB and sqlglot's optimizer and open the database on a thread of their own, once per
    process: while the command attaches to Spark (waiting on sockets), not on the first test."""
    global _warming
    with _database_lock:
        if _warming:
            return
        _warming = True

    def run() -> None:
        load("sqlglot")
        load("duckdb")
        import deltalog.scan  # noqa: F401

        _duckdb_cursor().close()

    thread = threading.Thread(target=run, name="deltalog-warm-up", daemon=True)
    thread.start()
    # a command that ends while DuckDB is still opening must wait for it: a daemon thread stopped inside
    # DuckDB's C++ at exit aborts the process ("terminate called ... exception not rethrown")
    atexit.register(thread.join, 30)


_warming = False
_cache: "OrderedDict[Tuple[str, int, str, tuple], Any]" = OrderedDict()
_cache_lock = threading.Lock()


def _rows(snapshot: Any, columns: List[str]) -> Any:
    """The snapshot's live rows of `columns`, kept for the next test of the same version of the table."""
    from deltalog.scan import read_table

    key = (snapshot.table_uri, snapshot.version, snapshot.metadata.id, tuple(columns))
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    table = read_table(snapshot, columns)
    with _cache_lock:
        _cache[key] = table
        while sum(t.nbytes for t in _cache.values()) > _CACHE_BYTES and len(_cache) > 1:
            _cache.popitem(last=False)
    return table
