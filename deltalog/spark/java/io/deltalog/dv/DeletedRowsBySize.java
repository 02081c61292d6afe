package io.deltalog.dv;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.HashMap;

import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.roaringbitmap.RoaringBitmap;

/**
 * Whether a row, given as its file's size in bytes (`_metadata.file_size`) and its position in that file
 * (`_metadata.row_index`), is one the file's deletion vector deletes. Used where every file of the scan
 * has a size no other file of the scan has: a long per row is far cheaper for Spark to hand a function
 * than a path, which it would copy into a Java string for every row.
 *
 * <p>The blob holds every file of the scan: its big-endian long size, the int length of a portable
 * 32-bit Roaring bitmap (0 for a file without a deletion vector), and the bitmap. A size the blob does
 * not hold is an error: the file on storage is not the size the log records, so which rows its
 * deletion vector deletes cannot be trusted.
 */
public final class DeletedRowsBySize implements UDF2<Long, Long, Boolean> {
  private static final long serialVersionUID = 1L;
  private static final RoaringBitmap NONE = new RoaringBitmap();
  private final byte[] blob;
  private transient HashMap<Long, RoaringBitmap> bySize;
  private transient long lastSize = -1;
  private transient RoaringBitmap last;

  public DeletedRowsBySize(byte[] blob) {
    this.blob = blob.clone();
  }

  /** This UDF as a Spark function marked nondeterministic (see DeletedRows#nondeterministic). */
  public UserDefinedFunction nondeterministic() {
    return functions.udf(this, DataTypes.BooleanType).asNondeterministic();
  }

  @Override
  public Boolean call(Long size, Long row) {
    if (size == null || row == null) return false;
    if (size != lastSize || last == null) {
      if (bySize == null) bySize = parse(blob);
      last = bySize.get(size);
      if (last == null) {
        throw new IllegalStateException("deltalog: a data file of " + size + " bytes is read, but the Delta log "
            + "records no file of that size in this scan: the file was changed or replaced after it was "
            + "committed, so its deletion vector cannot be applied to it");
      }
      lastSize = size;
    }
    return row >= 0 && row <= 0xffffffffL && last.contains((int) (long) row);
  }

  static HashMap<Long, RoaringBitmap> parse(byte[] blob) {
    ByteBuffer in = ByteBuffer.wrap(blob);
    HashMap<Long, RoaringBitmap> out = new HashMap<>();
    while (in.hasRemaining()) {
      long size = in.getLong();
      int length = in.getInt();
      RoaringBitmap rows = NONE;
      if (length > 0) {
        ByteBuffer bitmap = in.slice();
        bitmap.limit(length);
        rows = new RoaringBitmap();
        try {
          rows.deserialize(bitmap);
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
        in.position(in.position() + length);
      }
      out.put(size, rows);
    }
    return out;
  }
}
