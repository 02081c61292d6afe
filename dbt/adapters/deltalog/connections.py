"""Profile (`type: deltalog`) and the connection: a cursor over the process's SparkSession."""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from dbt.adapters.contracts.connection import AdapterResponse, Connection, ConnectionState, Credentials
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt.adapters.spark.connections import SparkConnectionManager
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.deltalog import spark_settings
from dbt.adapters.deltalog.warehouse import Warehouse
from dbt.adapters.deltalog.sql_gateway import answer_small_query, execute
from dbt.adapters.deltalog.runtime.session import RUNTIME
from deltalog import secrets
from deltalog.sql_text import sql_literal
from deltalog.errors import DeltaError
from deltalog.storage.files import is_object_store_uri

logger = AdapterLogger("Deltalog")


def _configure_hadoop(spark, root: str, storage_options: Dict[str, str]) -> None:
    """The storage options as Spark's Hadoop connector settings too (for a python model's own
    spark.read of the bucket), and which path table data takes, said once per warehouse in the log."""
    from deltalog.storage.files import redact
    from deltalog.spark import hadoop

    hadoop.apply(spark, root, storage_options)
    if not RUNTIME.first_description(root):
        return
    native, why = hadoop.native_io(spark, root)
    path = ("Spark's own Parquet writer (at their final keys: no rename, no listing) and reader" if native
            else "Spark tasks through pyarrow's file system at their final keys (no rename, no listing)")
    logger.debug(redact(f"{root}: table data files are written and read by {path}; {why}."))


def prepare_object_store(root: str, storage_options: Dict[str, str]) -> None:
    """Every table under an object-store warehouse uses the profile's storage options; the store is
    listed and written once per process (StoreUnreachableError naming warehouse, endpoint and cause)
    before anything touches it."""
    from deltalog.storage import files as filesystem
    from deltalog.storage.object_store import probe_warehouse

    filesystem.configure(root, storage_options)
    probe_warehouse(root)


def resolve_location(value: str, base_dir: Optional[str], key: str) -> str:
    """A warehouse as an object-store URI (s3://, abfss:// / az://, gs://) or an absolute local path;
    relative paths are taken from the project folder. A `file://` URI is a local path; other schemes
    are refused by name, never turned into a local folder called `hdfs:`."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(value)
    if is_object_store_uri(value) and parsed.scheme != "memory":
        if not parsed.netloc:
            raise DbtRuntimeError(f"deltalog profile: {key} {value!r} names no bucket or "
                                  f"container (e.g. s3://bucket/warehouse)")
        return value.rstrip("/")
    if parsed.scheme == "file":
        value = unquote(parsed.path)
    elif len(parsed.scheme) > 1:  # `C:` drive letters are paths
        raise DbtRuntimeError(
            f"deltalog profile: {key} {value!r} is a {parsed.scheme}:// URI, which this adapter "
            f"cannot store tables in. Allowed: a local folder (or a network file system mounted at the same "
            f"path on every Spark executor), a file:// URI, or an object store: s3://, abfss:// / az://, "
            f"gs://.")
    path = os.path.expanduser(value)
    if not os.path.isabs(path):
        path = os.path.join(base_dir or os.getcwd(), path)
    return os.path.abspath(path)


_CATALOG_KEYS = ("warehouse", "storage_options", "catalog")


def check_catalogs(catalogs: Any) -> Dict[str, Dict[str, Any]]:
    """The profile's `catalogs` checked: each a plain name mapping to {warehouse, storage_options?,
    catalog?}, or a DbtRuntimeError naming what is wrong and what is allowed."""
    import re

    from dbt.adapters.deltalog.metastore import parse_catalog

    allowed = ("Allowed: catalogs: {name: {warehouse: <folder or s3://...>, storage_options: {...}, "
               "catalog: {type: hive, uri: thrift://host:9083}}}, with `warehouse` required.")
    if not isinstance(catalogs, dict):
        raise DbtRuntimeError(f"deltalog profile: `catalogs` is {catalogs!r}. {allowed}")
    checked = {}
    for name, entry in catalogs.items():
        where = f"deltalog profile: catalogs.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise DbtRuntimeError(f"{where}: a catalog's name is letters, digits and '_' (a dbt `database` "
                                  f"in SQL as `name.schema.table`). {allowed}")
        if not isinstance(entry, dict) or not isinstance(entry.get("warehouse"), str) \
                or not entry["warehouse"].strip():
            raise DbtRuntimeError(f"{where} is {entry!r}: it needs its `warehouse`. {allowed}")
        unknown = sorted(set(entry) - set(_CATALOG_KEYS))
        if unknown:
            raise DbtRuntimeError(f"{where}: unknown keys {', '.join(unknown)}. {allowed}")
        options = entry.get("storage_options") or {}
        if not isinstance(options, dict):
            raise DbtRuntimeError(f"{where}.storage_options must be a mapping. {allowed}")
        parse_catalog(entry.get("catalog"))
        checked[name] = {"warehouse": entry["warehouse"].strip(),
                         "storage_options": {str(k): str(v) for k, v in options.items()},
                         "catalog": entry.get("catalog")}
    return checked


@dataclass
class DeltalogCredentials(Credentials):
    schema: Optional[str] = None  # type: ignore[assignment]
    database: Optional[str] = None  # type: ignore[assignment]
    warehouse: str = "./warehouse"
    # for an object-store warehouse: the keys delta-rs and object_store take (endpoint, region, keys, ...)
    storage_options: Dict[str, str] = field(default_factory=dict)
    master: str = "local[*]"
    spark_conf: Dict[str, str] = field(default_factory=dict)
    # A local Spark that outlives one dbt command (spark_server.py): auto = for a local master, unless
    # the CI variable is set (one-shot runs gain nothing from a server left behind).
    spark_server: Union[bool, str] = "auto"
    spark_server_idle_timeout: int = 900
    # data tests over small tables answered in the dbt process by DuckDB when their SQL means the same
    # there (driver_queries.py); false: every test is a Spark job
    small_tests_here: bool = True
    # small `table` models built in the dbt process by DuckDB and the engine's Arrow writer when their SQL
    # and settings give the same table there (small_models.py); false: every model is a Spark job
    small_models_here: bool = True
    # where Spark runs: `session` (in this process: embedded, or driving a cluster) or `connect` (a Spark
    # Connect server at `host`, sc://host:15002, with an optional bearer `token` and TLS)
    method: str = "session"
    host: Optional[str] = None
    token: Optional[str] = None
    use_ssl: bool = False
    # a Hive Metastore that lists every table and view built: {type: hive, uri: thrift://host:9083}
    catalog: Optional[Dict[str, Any]] = None
    # more warehouses, each a catalog a model or source names with its dbt `database`:
    # {name: {warehouse: ..., storage_options: {...}, catalog: {type: hive, uri: ...}}}
    catalogs: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def __pre_deserialize__(cls, data: Any) -> Any:
        import dataclasses

        from dbt.adapters.deltalog.profile_keys import profile_errors

        data = super().__pre_deserialize__(data)
        # A key this adapter ignored could make a profile meant for a remote server build here instead.
        if why := profile_errors(data, [f.name for f in dataclasses.fields(cls)]):
            raise DbtRuntimeError(f"deltalog profile: {why} Nothing was run.")
        if data.get("catalog") is not None:
            from dbt.adapters.deltalog.metastore import parse_catalog

            parse_catalog(data["catalog"])  # said by name before dbt's type check of the field
        if "database" not in data:
            data["database"] = None
        return data

    def __post_init__(self) -> None:
        if not self.schema:
            raise DbtRuntimeError("deltalog profile: `schema` is required (a folder of the warehouse)")
        if self.database is not None and self.database != self.schema:
            raise DbtRuntimeError(
                f"deltalog profile: `database` ({self.database}) must be omitted or equal `schema` "
                f"({self.schema}); a schema is a folder of the warehouse. To build in another warehouse, "
                f"attach it under `catalogs` and give the models that `database`."
            )
        self.database = None
        self.method = str(self.method).strip().lower()
        if not isinstance(self.spark_conf, dict):
            raise DbtRuntimeError("deltalog profile: `spark_conf` must be a mapping of Spark settings")
        wrong = spark_settings.problems(self.spark_conf)
        if wrong:
            raise DbtRuntimeError("deltalog profile: spark_conf: " + " ".join(wrong) + " Nothing was run.")
        if not isinstance(self.storage_options, dict):
            raise DbtRuntimeError("deltalog profile: `storage_options` must be a mapping (AWS_ENDPOINT_URL, "
                                  "AWS_REGION, AZURE_STORAGE_ACCOUNT_NAME, ... as delta-rs takes them)")
        self.storage_options = {str(k): str(v) for k, v in self.storage_options.items()}
        if isinstance(self.spark_server, str) and self.spark_server.strip().lower() in ("true", "false", "auto"):
            self.spark_server = {"true": True, "false": False}.get(self.spark_server.strip().lower(), "auto")
        if self.spark_server not in (True, False, "auto"):
            raise DbtRuntimeError(
                f"deltalog profile: `spark_server` is {self.spark_server!r}; allowed: true (keep a local Spark "
                f"running between dbt commands), false (start Spark inside each command) or auto (true for a "
                f"local master outside CI)")
        from dbt.adapters.deltalog.metastore import parse_catalog

        parse_catalog(self.catalog)  # a wrong one fails here, naming what is allowed
        self.catalogs = check_catalogs(self.catalogs)
        seen: Dict[str, str] = {}
        for name, metastore in self.metastores().items():
            # a metastore database would belong to two catalogs: dropping one's schema drops the other's
            label = f"catalogs.{name}" if name else "the profile's own `catalog`"
            if metastore.uri in seen:
                raise DbtRuntimeError(
                    f"deltalog profile: {label} and {seen[metastore.uri]} name the same Hive Metastore "
                    f"{metastore.uri}; each catalog needs a metastore of its own (a schema is one metastore "
                    f"database). Nothing was run.")
            seen[metastore.uri] = label
        if isinstance(self.spark_server_idle_timeout, bool) or not isinstance(self.spark_server_idle_timeout, int) \
                or self.spark_server_idle_timeout < 1:
            raise DbtRuntimeError(
                f"deltalog profile: `spark_server_idle_timeout` is {self.spark_server_idle_timeout!r}; allowed: "
                f"a whole number of seconds, at least 1")

    def connect_url(self) -> Optional[str]:
        """The Spark Connect connection string of `method: connect` (None for `session`)."""
        if self.method != "connect":
            return None
        from dbt.adapters.deltalog.runtime.connect import connection_url

        return connection_url(str(self.host), self.token, bool(self.use_ssl))

    def session_arguments(self) -> Dict[str, Any]:
        """`RUNTIME.get_spark`'s arguments for this profile."""
        return {"master": self.master, "spark_conf": self.spark_conf, "server": self.uses_spark_server(),
                "idle_timeout": self.spark_server_idle_timeout, "remote": self.connect_url()}

    def check_settings(self) -> Dict[str, Any]:
        """What Spark's analysis of a view's SQL depends on besides the SQL and its inputs (view_check.py):
        where Spark runs, its SQL settings, and the versions of Spark and of this adapter."""
        from importlib.metadata import PackageNotFoundError, version

        def installed(package: str) -> Optional[str]:
            try:
                return version(package)
            except PackageNotFoundError:
                return None

        return {"method": self.method, "host": self.host if self.method == "connect" else None,
                "sql": {k: str(v) for k, v in sorted((self.spark_conf or {}).items()) if str(k).startswith("spark.sql.")},
                "spark": installed("pyspark") or installed("pyspark-client"), "adapter": installed("dbt-deltalog")}

    def switched_on(self, switch: str) -> bool:
        """One of our `spark.deltalog.*` switches (spark_settings.SWITCHES)."""
        return spark_settings.switched_on(self.spark_conf, switch)

    def uses_spark_server(self) -> bool:
        if self.method == "connect":
            return False
        if RUNTIME.continuous is not None:  # long-running streams get a JVM of their own: a killed runner takes its queries along
            return False
        if self.spark_server == "auto":
            in_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
            return self.master.startswith("local") and not in_ci
        return bool(self.spark_server)

    def resolve_warehouse(self, base_dir: Optional[str] = None) -> str:
        """The warehouse, and each attached catalog's, as an object-store URI or an absolute local path
        (see `resolve_location`)."""
        self.warehouse = resolve_location(self.warehouse, base_dir, "warehouse")
        for name, entry in self.catalogs.items():
            entry["warehouse"] = resolve_location(entry["warehouse"], base_dir, f"catalogs.{name}.warehouse")
        return self.warehouse

    def warehouses(self) -> Warehouse:
        """The profile's warehouse, with its attached catalogs (`Warehouse.of`)."""
        self.resolve_warehouse()  # a no-op once the adapter resolved them from the project folder
        warehouse = Warehouse(self.warehouse, RUNTIME.external_tables, storage_options=self.storage_options)
        for name, entry in self.catalogs.items():
            warehouse.attach(name, entry["warehouse"], entry.get("storage_options"))
        return warehouse

    def storage_options_of(self, catalog: Optional[str]) -> Dict[str, str]:
        return self.catalogs[catalog].get("storage_options") or {} if catalog else self.storage_options

    def metastores(self) -> Dict[Optional[str], Any]:
        """The Hive Metastore of each catalog that has one (None: the profile's own warehouse)."""
        from dbt.adapters.deltalog.metastore import parse_catalog

        found = {None: parse_catalog(self.catalog)}
        found.update({name: parse_catalog(entry.get("catalog")) for name, entry in self.catalogs.items()})
        return {name: metastore for name, metastore in found.items() if metastore is not None}

    @property
    def type(self) -> str:
        return "deltalog"

    @property
    def unique_field(self) -> str:
        return self.warehouse

    def _connection_keys(self) -> Tuple[str, ...]:
        if self.method == "connect":  # (never the token)
            return ("schema", "warehouse", "storage_options", "method", "host", "use_ssl", "spark_conf", "catalog",
                    "catalogs")
        return ("schema", "warehouse", "storage_options", "master", "spark_conf", "spark_server", "catalog",
                "catalogs")

    def connection_info(self, *, with_aliases: bool = False) -> Iterable[Tuple[str, Any]]:
        """What `dbt debug` prints: secret-looking spark_conf values are masked. dbt also hashes these
        to decide whether to parse the project again: nothing here may change between commands."""
        for key, value in super().connection_info(with_aliases=with_aliases):
            secret_keyed = key in ("spark_conf", "storage_options") and isinstance(value, dict)
            if key == "catalogs" and isinstance(value, dict):  # each attached warehouse's storage options
                value = {name: {**entry, "storage_options": redact_conf(entry.get("storage_options") or {})}
                         for name, entry in value.items()}
            yield key, redact_conf(value) if secret_keyed else value

    def spark_server_status(self) -> str:
        if not self.uses_spark_server():
            return f"off (spark_server: {str(self.spark_server).lower()}; Spark starts inside each dbt command)"
        from dbt.adapters.deltalog.runtime.spark_server import describe

        return describe(self.master, self.spark_conf)


def redact_conf(conf: Dict[str, Any]) -> Dict[str, Any]:
    return secrets.redacted(conf)


def redact_text(text: str, conf: Dict[str, Any]) -> str:
    """`text` with the values of secret settings replaced (errors may echo the configuration)."""
    return secrets.redact(text, secrets.secret_values(conf.items()))


class DeltalogCursor:
    """DB-API-like cursor: each statement goes through the SQL gateway (sql_gateway.py); rows are
    fetched on demand."""

    def __init__(self, open_spark: Callable[[], Any], warehouse: Warehouse, small_query_here: bool = False,
                 reuse_answers: bool = False):
        self._open_spark = open_spark  # the session, called for only when a statement needs Spark
        self.warehouse = warehouse
        self.small_query_here = small_query_here  # a data test's: see sql_gateway.answer_small_query
        self.reuse_answers = reuse_answers
        self._df = None
        self._rows: Optional[List] = None
        self._columns: Optional[List] = None

    def execute(self, sql: str, bindings: Optional[List[Any]] = None) -> None:
        sql = sql.strip()
        while sql.endswith(";"):
            sql = sql[:-1].rstrip()
        if bindings:
            sql = sql % tuple(sql_literal(b) for b in bindings)
        outcome = answer_small_query(self.warehouse, sql, self.reuse_answers) if self.small_query_here else None
        if outcome is None:
            outcome = execute(self._open_spark(), self.warehouse, sql, _dml_commit_info())
        self._df, self._rows, self._columns = outcome.dataframe, outcome.rows, outcome.columns

    def fetchall(self) -> List:
        if self._rows is None:
            self._rows = self._df.collect() if self._df is not None else []
        return self._rows

    def fetchone(self):
        rows = self.fetchall()
        return rows.pop(0) if rows else None

    def fetchmany(self, size: int) -> List:
        if self._rows is None and self._df is not None:
            self._rows = self._df.take(size)
        rows = self._rows or []
        out, self._rows = rows[:size], rows[size:]
        return out

    @property
    def description(self):
        if self._columns is not None:
            return [(name, kind.lower(), None, None, None, None, True) for name, kind in self._columns]
        if self._df is None:
            return []
        return [
            (f.name, f.dataType.simpleString(), None, None, None, None, f.nullable)
            for f in self._df.schema.fields
        ]

    @property
    def dataframe(self):
        return self._df

    def close(self) -> None:
        self._df, self._rows, self._columns = None, None, None


def _dml_commit_info() -> Dict[str, Any]:
    try:
        from dbt_common.invocation import get_invocation_id

        return {"dbtInvocationId": get_invocation_id()}
    except Exception:
        return {}


SESSION_REACHED = "a statement needs Spark: the session was reached"


class DeltalogHandle:
    """What dbt holds as `connection.handle`; `cursor()` returns a fresh cursor. The Spark session is
    reached when something first needs it (`spark`): seeds the engine writes, views checked before and
    data tests answered in this process never wait for a JVM that is still starting."""

    def __init__(self, open_spark: Callable[[], Any], warehouse: Warehouse, connection: Optional[Connection] = None,
                 small_tests_here: bool = False, reuse_answers: bool = False):
        self._open_spark = open_spark
        self._spark = None
        self.warehouse = warehouse
        self._connection = connection  # dbt names it after the node it runs
        self._small_tests_here = small_tests_here
        self._reuse_answers = reuse_answers
        self._cursor: Optional[DeltalogCursor] = None

    @property
    def spark(self):
        if self._spark is None:
            self._spark = self._open_spark()
        RUNTIME.command.tag_thread(self._spark)  # statements of this thread are this command's jobs
        return self._spark

    def cursor(self) -> DeltalogCursor:
        node = str(getattr(self._connection, "name", None) or "")
        self._cursor = DeltalogCursor(lambda: self.spark, self.warehouse,
                                      small_query_here=self._small_tests_here and node.startswith("test."),
                                      reuse_answers=self._reuse_answers)
        return self._cursor

    def cancel(self) -> None:
        # dbt cancels on Ctrl-C: stop this command's Spark jobs, so a model still writing fails (and
        # cleans up) instead of committing after the command was cancelled. Jobs of other commands
        # on the same Spark server carry other tags and go on. A connection that never reached Spark
        # still refuses the command's commits (seeds the engine writes).
        RUNTIME.command.cancel_jobs(self._spark if self._spark is not None else RUNTIME.spark)

    def close(self) -> None:
        if self._cursor:
            self._cursor.close()

    def rollback(self, *args: Any, **kwargs: Any) -> None:
        pass


class DeltalogConnectionManager(SparkConnectionManager):
    TYPE = "deltalog"

    @classmethod
    def _rollback_handle(cls, connection: Connection) -> None:
        # a connection never opened (dbt's lazy handle) has nothing to roll back: resolving the handle
        # would start Spark at the end of a command that never needed it (seeds written without it)
        if connection.state != ConnectionState.INIT:
            super()._rollback_handle(connection)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        RUNTIME.command.new()  # dbt builds the adapter once per command

    @contextmanager
    def exception_handler(self, sql: str):
        try:
            yield
        except DbtRuntimeError:
            raise
        except Exception as exc:
            logger.debug("Error while running:\n{}".format(sql))
            logger.debug(exc)
            raise DbtRuntimeError(_short_error(exc)) from exc

    def cancel(self, connection: Connection) -> None:
        if isinstance(connection.handle, DeltalogHandle):
            try:
                connection.handle.cancel()
            except Exception as exc:  # the run is ending anyway
                logger.debug(f"cancelling Spark jobs: {exc}")

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        creds: DeltalogCredentials = connection.credentials
        if creds.small_tests_here or creds.small_models_here:
            from dbt.adapters.deltalog.driver_queries import warm_up

            warm_up()
        warehouse = creds.warehouses()
        for name, catalog in warehouse.catalogs.items():
            if catalog.on_object_store:
                try:
                    prepare_object_store(catalog.root, creds.storage_options_of(name))
                except DeltaError as exc:
                    raise FailedToConnectError(str(exc)) from None
        handle = DeltalogHandle(lambda: cls._open_spark(creds, warehouse), warehouse, connection,
                                creds.small_tests_here, creds.switched_on(spark_settings.ANSWER_REUSE))
        if creds.method == "connect" or not creds.master.startswith("local"):
            # a cluster's executors must share the warehouse: checked before anything is written
            handle.spark
        connection.handle = handle
        connection.state = ConnectionState.OPEN
        return connection

    @staticmethod
    def _open_spark(creds: DeltalogCredentials, warehouse: Warehouse):
        """The profile's Spark session, made ready for the warehouse: what a connection's first statement
        or write that needs Spark waits for."""
        began = time.monotonic()
        try:
            spark = RUNTIME.get_spark(**creds.session_arguments())
        except Exception as exc:
            where = f"Spark Connect ({creds.host})" if creds.method == "connect" else f"Spark ({creds.master})"
            raise FailedToConnectError(
                redact_text(f"could not start {where}: {exc}", creds.spark_conf)) from None
        if creds.method == "connect" and RUNTIME.first_description("spark-connect-jar"):
            refused = getattr(spark, "_deltalog_jar_refused", None)
            logger.debug("Spark Connect: the jar's classes (clustering ranks and curve keys) run on the server, "
                         "sent as an artifact of this session" if refused is None else
                         f"Spark Connect: the server refused the jar as an artifact ({refused}): clustering "
                         f"ranks and curve keys come from plain Spark expressions")
        for name, catalog in warehouse.catalogs.items():
            try:
                if catalog.on_object_store:
                    _configure_hadoop(spark, catalog.root, creds.storage_options_of(name))
                RUNTIME.check_warehouse_shared(spark, catalog.root)
            except DeltaError as exc:
                raise FailedToConnectError(str(exc)) from None
        logger.debug(f"{SESSION_REACHED} in {time.monotonic() - began:.1f} s")
        return spark

    @classmethod
    def get_response(cls, cursor: Any) -> AdapterResponse:
        return AdapterResponse(_message="OK")

    @classmethod
    def data_type_code_to_name(cls, type_code) -> str:  # type: ignore[override]
        return type_code if isinstance(type_code, str) else type_code.__name__.upper()


_DISK_FULL = "The disk holding the warehouse is full: free space or move the warehouse"
_READ_ONLY = "The warehouse is on a read-only file system: point `warehouse` at a writable folder"
# Words of an error's text that say what the file system refused.
_IO_HINTS = (
    ("no space left on device", _DISK_FULL),
    ("disk quota exceeded", "The disk quota of the warehouse's file system is used up"),
    ("read-only file system", _READ_ONLY),
    ("permission denied", "This user may not write there: check the warehouse folder's permissions"),
)


def storage_problem(path: str) -> Optional[str]:
    """What is wrong with the file system holding `path`, when something plainly is: read-only, or no
    space left. Spark's messages often hide it ("Mkdirs failed to create ...")."""
    from deltalog.storage.files import is_object_store_uri

    if is_object_store_uri(path):
        return None
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return _READ_ONLY
    if st.f_bavail * st.f_frsize < 1 << 20:
        return _DISK_FULL
    return None


def _worker_environment_hint(text: str) -> Optional[str]:
    """A Python task of Spark that could not import a module: the executors' interpreter is not this
    environment."""
    if "Python worker" not in text and "PythonException" not in text:
        return None
    missing = re.search(r"No module named '([\w.]+)'", text)
    if not missing:
        return None
    interpreter = os.environ.get("PYSPARK_PYTHON") or "python3"
    return (f"Spark's Python workers could not import {missing.group(1)!r}: executors run Python tasks with "
            f"{interpreter} (spark.pyspark.python / PYSPARK_PYTHON), which needs dbt-deltalog and its "
            f"dependencies installed. Install them at that path on every worker, or pack this environment "
            f"(venv-pack) and ship it with spark.archives (docs: Profiles and runtimes, On a Spark cluster)")


def _short_error(exc: BaseException, location: Optional[str] = None) -> str:
    """One message for an error from Spark, the engine or the file system: Spark's message without its
    JVM stack trace, plus the root cause ("Caused by: ...") and what it means for the common I/O
    failures (disk full, read-only or forbidden folder; probed at `location` when given)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    else:
        text = str(exc)
    lines = text.splitlines()
    causes = [ln.strip()[len("Caused by: "):] for ln in lines if ln.strip().startswith("Caused by: ")]
    body = []
    for ln in lines:
        if ln.startswith("\tat ") or ln.strip().startswith(("Caused by: ", "... ", "JVM stacktrace:")):
            break
        body.append(ln)
    message = " ".join(ln.strip().lstrip(": ").strip() for ln in body if ln.strip())
    message = re.sub(r"^An error occurred while calling o\d+\.\w+\.\s*", "", message)
    root = causes[-1] if causes else ""
    if root and root not in message:
        message += f" (cause: {root})"
    lowered = (message + " " + root).lower()
    hint = storage_problem(location) if location else None
    hint = hint or next((h for needle, h in _IO_HINTS if needle in lowered), None)
    hint = hint or _worker_environment_hint(text)
    if hint:
        message += f". {hint}"
    from deltalog.storage.files import redact

    return redact(message) or type(exc).__name__
