package io.deltalog.dv;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.TaskContext;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.vectorized.OffHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.roaringbitmap.PeekableIntIterator;
import org.roaringbitmap.RoaringBitmap;
import scala.Function1;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag$;

/**
 * Spark's Parquet format, plus a boolean column {@value #DELETED} that is true for the rows the files'
 * deletion vectors delete: a scan reads `spark.read.format(this class).schema(table columns + DELETED)
 * .option(OPTION, blob)` and keeps the rows `NOT DELETED`. The column is computed per batch of the native
 * vectorized reader (a Filter on a boolean vector costs next to nothing), never per row through a function.
 *
 * <p>A file read whole with no filter pushed down yields all its rows in order, so the position of a row
 * is counted; a file split over several tasks, or read with row-group filters, asks the reader for
 * Spark's row index (`_tmp_metadata_row_index`), which costs a fifth of a one-column scan more.
 *
 * <p>The option holds, base64-encoded, per file of the scan: the int length of its key (see
 * {@link DeletedRows#key}), the key, its big-endian long size, the int length of a portable 32-bit
 * Roaring bitmap (0: no deletion vector) and the bitmap. It travels inside the plan, so a view read again
 * much later still finds it. A file missing from it, or of another size, is an error: which rows its
 * deletion vector deletes cannot be trusted.
 */
public class DeletionVectorParquetFormat extends ParquetFileFormat {
  private static final long serialVersionUID = 1L;
  public static final String DELETED = "__deltalog_deleted";
  public static final String OPTION = "deltalog.deletionVectors";

  @Override
  public String toString() {
    return "Parquet with deletion vectors";
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof DeletionVectorParquetFormat;
  }

  @Override
  public int hashCode() {
    return DeletionVectorParquetFormat.class.hashCode();
  }

  @Override
  public Function1<PartitionedFile, Iterator<InternalRow>> buildReaderWithPartitionValues(
      SparkSession session, StructType dataSchema, StructType partitionSchema, StructType requiredSchema,
      Seq<Filter> filters, Map<String, String> options, Configuration hadoopConf) {
    String encoded = options.get(OPTION).getOrElse(() -> null);
    if (encoded == null) throw new IllegalArgumentException("deltalog: a scan with deletion vectors lacks " + OPTION);
    int flagAt = fieldIndex(requiredSchema, DELETED);
    if (flagAt < 0) {
      throw new IllegalStateException("deltalog: a scan with deletion vectors must read " + DELETED
          + " and keep the rows where it is false");
    }
    Broadcast<byte[]> blob = session.sparkContext().broadcast(
        Base64.getDecoder().decode(encoded), ClassTag$.MODULE$.apply(byte[].class));

    // the flag is ours: Parquet never sees it, neither as a column nor in a pushed-down filter
    List<Filter> kept = new ArrayList<>();
    for (Filter f : CollectionConverters.asJava(filters)) {
      if (!List.of(f.references()).contains(DELETED)) kept.add(f);
    }
    Seq<Filter> pushed = CollectionConverters.asScala(kept).toSeq();
    boolean unfiltered = kept.isEmpty();
    StructType data = without(dataSchema, DELETED);
    StructType required = without(requiredSchema, DELETED);
    String rowIndexName = ParquetFileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME();
    int rowIndexAt = fieldIndex(required, rowIndexName);  // already asked for (`_metadata.row_index`)
    StructField rowIndex = new StructField(rowIndexName, DataTypes.LongType, true, Metadata.empty());
    StructType requiredWithIndex = rowIndexAt >= 0 ? required : required.add(rowIndex);
    StructType dataWithIndex = fieldIndex(data, rowIndexName) >= 0 ? data : data.add(rowIndex);
    int indexAt = rowIndexAt >= 0 ? rowIndexAt : required.length();

    // Each reader gets its own copy of the Hadoop conf: Parquet's reader takes the schema it reads from
    // there, and a local master's broadcast of it is the very object, not a copy.
    Function1<PartitionedFile, Iterator<InternalRow>> plain = super.buildReaderWithPartitionValues(
        session, data, partitionSchema, required, pushed, options, new Configuration(hadoopConf));
    Function1<PartitionedFile, Iterator<InternalRow>> indexed = super.buildReaderWithPartitionValues(
        session, dataWithIndex, partitionSchema, requiredWithIndex, pushed, options, new Configuration(hadoopConf));
    int width = requiredSchema.length();
    int partitions = partitionSchema.length();
    int[] fromPlain = layout(width, flagAt, -1);
    int[] fromIndexed = layout(width, flagAt, rowIndexAt >= 0 ? -1 : required.length());
    boolean offHeap = session.sessionState().conf().offHeapColumnVectorEnabled();

    return (Function1<PartitionedFile, Iterator<InternalRow>> & Serializable) file -> {
      RoaringBitmap rows = Files.of(blob.value()).rowsOf(file);
      // all the file's rows in order (its positions counted), or no deleted row to find
      boolean counted = rows.isEmpty() || (unfiltered && file.start() == 0 && file.length() == file.fileSize());
      Iterator<InternalRow> base = counted ? plain.apply(file) : indexed.apply(file);
      // a vectorized reader's iterator says rows but yields batches (Spark's convention): typed Object here
      @SuppressWarnings("unchecked")
      Iterator<InternalRow> flagged = (Iterator<InternalRow>) (Iterator<?>) new Flagged(
          (Iterator<Object>) (Iterator<?>) base, rows, counted ? fromPlain : fromIndexed, partitions, flagAt,
          counted ? -1 : indexAt, offHeap);
      return flagged;
    };
  }

  static int fieldIndex(StructType schema, String name) {
    String[] names = schema.fieldNames();
    for (int i = 0; i < names.length; i++) if (names[i].equals(name)) return i;
    return -1;
  }

  static StructType without(StructType schema, String name) {
    List<StructField> fields = new ArrayList<>();
    for (StructField f : schema.fields()) if (!f.name().equals(name)) fields.add(f);
    return new StructType(fields.toArray(new StructField[0]));
  }

  /**
   * For each required column (the flag at `flagAt`), the column of the reader's batch it is (-1: the
   * flag). The reader's batch lacks the flag and may hold an added row index at `skipped`, after the
   * required columns; partition columns come last (`Flagged.outputs`).
   */
  static int[] layout(int width, int flagAt, int skipped) {
    int[] from = new int[width];
    int source = 0;
    for (int out = 0; out < width; out++) {
      if (out == flagAt) {
        from[out] = -1;
        continue;
      }
      if (source == skipped) source++;
      from[out] = source++;
    }
    return from;
  }

  /** The scan's files, parsed once per task from the option's blob. */
  static final class Files {
    private static final java.util.Map<byte[], Files> PARSED = new java.util.WeakHashMap<>();
    private final HashMap<String, Long> sizes = new HashMap<>();
    private final HashMap<String, RoaringBitmap> bitmaps = new HashMap<>();

    static Files of(byte[] blob) {
      synchronized (PARSED) {
        return PARSED.computeIfAbsent(blob, Files::new);
      }
    }

    private Files(byte[] blob) {
      ByteBuffer in = ByteBuffer.wrap(blob);
      while (in.hasRemaining()) {
        byte[] key = new byte[in.getInt()];
        in.get(key);
        String name = new String(key, StandardCharsets.UTF_8);
        sizes.put(name, in.getLong());
        bitmaps.put(name, DeletedRows.readBitmap(in));
      }
    }

    RoaringBitmap rowsOf(PartitionedFile file) {
      String key = DeletedRows.key(file.urlEncodedPath());
      Long size = sizes.get(key);
      if (size == null) {
        throw new IllegalStateException("deltalog: " + key + " is read, but the Delta log records no such "
            + "file in this scan, so which of its rows are deleted is unknown");
      }
      if (size != file.fileSize()) {
        throw new IllegalStateException("deltalog: " + key + " is " + file.fileSize() + " bytes, but the Delta "
            + "log records " + size + ": the file was changed or replaced after it was committed, so its "
            + "deletion vector cannot be applied to it");
      }
      return bitmaps.get(key);
    }
  }

  /** The reader's batches (or rows) with the flag column put in. */
  static final class Flagged extends scala.collection.AbstractIterator<Object> {
    private final Iterator<Object> base;
    private final RoaringBitmap deleted;
    private final int[] required;
    private final int partitions;
    private int[] from;  // `required`, then the reader's last `partitions` columns
    private final int flagAt;
    private final int indexAt;  // the reader's row-index column, or -1: count rows from 0
    private final boolean offHeap;
    private final PeekableIntIterator cursor;
    private long nextDeleted = -1;  // the first deleted row at or after the last one asked about
    private long lastRow = -1;
    private long counted;
    private WritableColumnVector flag;
    private int flagCapacity;
    private ColumnVector[] columns;

    Flagged(Iterator<Object> base, RoaringBitmap deleted, int[] required, int partitions, int flagAt, int indexAt,
            boolean offHeap) {
      this.base = base;
      this.deleted = deleted;
      this.required = required;
      this.partitions = partitions;
      this.flagAt = flagAt;
      this.indexAt = indexAt;
      this.offHeap = offHeap;
      this.cursor = deleted.getIntIterator();
    }

    /** Where each output column comes from, for a reader's batch or row of `width` columns. */
    private int[] outputs(int width) {
      if (from == null) {
        from = java.util.Arrays.copyOf(required, required.length + partitions);
        for (int j = 0; j < partitions; j++) from[required.length + j] = width - partitions + j;
        columns = new ColumnVector[from.length];
      }
      return from;
    }

    @Override
    public boolean hasNext() {
      return base.hasNext();
    }

    @Override
    public Object next() {
      Object next = base.next();
      if (next instanceof ColumnarBatch) return flagBatch((ColumnarBatch) next);
      InternalRow row = (InternalRow) next;
      long position = indexAt < 0 ? counted++ : row.getLong(indexAt);
      return new FlaggedRow(row, outputs(row.numFields()), flagAt, isDeleted(position));
    }

    private ColumnarBatch flagBatch(ColumnarBatch batch) {
      int n = batch.numRows();
      if (flag == null || flagCapacity < n) {
        if (flag != null) flag.close();
        flagCapacity = Math.max(n, 4096);
        flag = offHeap ? new OffHeapColumnVector(flagCapacity, DataTypes.BooleanType)
            : new OnHeapColumnVector(flagCapacity, DataTypes.BooleanType);
        WritableColumnVector owned = flag;
        TaskContext task = TaskContext.get();
        if (task != null) task.addTaskCompletionListener((TaskCompletionListener) context -> owned.close());
      }
      flag.putBooleans(0, n, false);
      if (!deleted.isEmpty()) {
        if (indexAt < 0) {
          long first = counted;
          counted += n;
          // rows first .. first + n - 1 of the file: mark the deleted ones among them
          for (long row = nextAtOrAfter(first); row < first + n; row = nextAtOrAfter(row + 1)) {
            flag.putBoolean((int) (row - first), true);
          }
        } else {
          ColumnVector index = batch.column(indexAt);
          for (int i = 0; i < n; i++) if (isDeleted(index.getLong(i))) flag.putBoolean(i, true);
        }
      } else if (indexAt < 0) {
        counted += n;
      }
      int[] from = outputs(batch.numCols());
      for (int out = 0; out < from.length; out++) columns[out] = from[out] < 0 ? flag : batch.column(from[out]);
      return new ColumnarBatch(columns, n);
    }

    /** The first deleted row at or after `row` (Long.MAX_VALUE: none); rows are asked about in order. */
    private long nextAtOrAfter(long row) {
      if (row < lastRow) throw new IllegalStateException("deltalog: rows of a file read out of order");
      lastRow = row;
      if (row <= nextDeleted) return nextDeleted;
      if (row > 0xffffffffL) return Long.MAX_VALUE;
      cursor.advanceIfNeeded((int) row);  // unsigned, as the bitmap orders its values
      nextDeleted = cursor.hasNext() ? Integer.toUnsignedLong(cursor.peekNext()) : Long.MAX_VALUE;
      return nextDeleted;
    }

    private boolean isDeleted(long row) {
      if (row < lastRow) return deleted.contains((int) row);  // not in order (not expected): look it up
      return row >= 0 && nextAtOrAfter(row) == row;
    }
  }
}
