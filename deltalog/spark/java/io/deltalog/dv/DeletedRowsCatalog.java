package io.deltalog.dv;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.NoSuchFunctionException;
import org.apache.spark.sql.connector.catalog.FunctionCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.functions.BoundFunction;
import org.apache.spark.sql.connector.catalog.functions.ScalarFunction;
import org.apache.spark.sql.connector.catalog.functions.UnboundFunction;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.roaringbitmap.PeekableIntIterator;
import org.roaringbitmap.RoaringBitmap;

/**
 * A function catalog (Spark's DataSource V2 API) whose functions `dv.d<id>(file_size, row_index)` and
 * `dv_nondeterministic.d<id>(...)` say whether a row, given as its file's size in bytes
 * (`_metadata.file_size`) and its position in that file (`_metadata.row_index`), is one the file's
 * deletion vector deletes. Used where every file of the scan has a size no other file of the scan has:
 * a long per row is far cheaper for Spark to hand over than a path.
 *
 * <p>The deletion vectors are registered on the driver first (`register`) as one blob holding every
 * file of the scan: its big-endian long size, the int length of a portable 32-bit Roaring bitmap (0 for a
 * file without a deletion vector), and the bitmap. The function object carries them to the executors
 * inside the plan, without them being spelled in the plan's text as a literal argument would be.
 *
 * <p>Spark calls the function's "magic" `invoke` method from generated code with primitive longs. Rows
 * of a file arrive in order, so each file's deleted rows are walked with the bitmap's cursor (a rare
 * step forward per row), where a bitmap lookup per row cost a 10M-row scan of one column more than
 * half its time again.
 * A size the blob does not hold is an error: the file on storage is not the size the log records, so
 * which rows its deletion vector deletes cannot be trusted. The nondeterministic variant is left where
 * the query puts it (say after a join that keeps few rows) instead of being pushed down to the scan.
 */
public final class DeletedRowsCatalog implements FunctionCatalog {
  private static final int KEPT = 64;
  // the blobs of recent scans, by id (the last KEPT: a query binds its function when it is analyzed)
  private static final Map<String, byte[]> BLOBS = new LinkedHashMap<String, byte[]>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, byte[]> eldest) {
      return size() > KEPT;
    }
  };
  private String name;

  /** Registers a scan's deletion vectors under `id` (letters and digits), on the driver. */
  public static void register(String id, byte[] blob) {
    synchronized (BLOBS) {
      BLOBS.put(id, blob.clone());
    }
  }

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public Identifier[] listFunctions(String[] namespace) {
    return new Identifier[0];
  }

  @Override
  public UnboundFunction loadFunction(Identifier ident) throws NoSuchFunctionException {
    String[] ns = ident.namespace();
    String fn = ident.name();
    if (ns.length == 1 && (ns[0].equals("dv") || ns[0].equals("dv_nondeterministic")) && fn.startsWith("d")) {
      byte[] blob;
      synchronized (BLOBS) {
        blob = BLOBS.get(fn.substring(1));
      }
      if (blob != null) return new IsDeleted(blob, ns[0].equals("dv"));
    }
    throw new NoSuchFunctionException(ident);
  }

  static HashMap<Long, RoaringBitmap> parse(byte[] blob) {
    ByteBuffer in = ByteBuffer.wrap(blob);
    HashMap<Long, RoaringBitmap> out = new HashMap<>();
    while (in.hasRemaining()) {
      long size = in.getLong();
      RoaringBitmap rows = DeletedRows.readBitmap(in);
      out.put(size, rows);
    }
    return out;
  }

  /** The function, unbound and bound at once: its input types never vary. */
  public static final class IsDeleted implements UnboundFunction, ScalarFunction<Boolean>, Serializable {
    private static final long serialVersionUID = 1L;
    private final byte[] blob;
    private final boolean deterministic;
    private transient HashMap<Long, RoaringBitmap> bySize;
    private transient long lastSize;
    private transient RoaringBitmap rows;
    private transient PeekableIntIterator cursor;
    private transient long lastRow;
    private transient long nextDeleted;  // the first deleted row at or after lastRow (Long.MAX_VALUE: none)

    IsDeleted(byte[] blob, boolean deterministic) {
      this.blob = blob;
      this.deterministic = deterministic;
    }

    @Override
    public BoundFunction bind(StructType inputType) {
      return this;
    }

    @Override
    public String description() {
      return "whether a deletion vector deletes the row (file_size bigint, row_index bigint)";
    }

    @Override
    public String name() {
      return "is_deleted";
    }

    @Override
    public DataType[] inputTypes() {
      return new DataType[] {DataTypes.LongType, DataTypes.LongType};
    }

    @Override
    public DataType resultType() {
      return DataTypes.BooleanType;
    }

    @Override
    public boolean isResultNullable() {
      return false;
    }

    @Override
    public boolean isDeterministic() {
      return deterministic;
    }

    /**
     * Called by Spark's generated code for every row. Rows of a file arrive in order, so most calls
     * only compare the row with the next deleted one; the bitmap's cursor moves on the few others.
     */
    public boolean invoke(long size, long row) {
      if (rows == null || size != lastSize) {
        if (bySize == null) bySize = parse(blob);
        rows = bySize.get(size);
        if (rows == null) {
          throw new IllegalStateException("deltalog: a data file of " + size + " bytes is read, but the Delta "
              + "log records no file of that size in this scan: the file was changed or replaced after it was "
              + "committed, so its deletion vector cannot be applied to it");
        }
        lastSize = size;
        cursor = null;
      }
      if (cursor == null || row < lastRow) {  // (re)start the walk
        cursor = rows.getIntIterator();
        nextDeleted = -1;
      }
      lastRow = row;
      if (row < nextDeleted) return false;
      if (row > 0xffffffffL || row < 0) return false;
      cursor.advanceIfNeeded((int) row);  // unsigned, as the bitmap orders its values
      nextDeleted = cursor.hasNext() ? Integer.toUnsignedLong(cursor.peekNext()) : Long.MAX_VALUE;
      return row == nextDeleted;
    }

    @Override
    public Boolean produceResult(InternalRow input) {
      return invoke(input.getLong(0), input.getLong(1));
    }
  }
}
