package io.deltalog.dv;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.BinaryView;
import org.apache.spark.unsafe.types.CalendarInterval;
import org.apache.spark.unsafe.types.TimestampNanosVal;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * A row of the Parquet reader (when it yields rows, not batches) seen with the deletion flag put in at
 * `flagAt`: every other column `o` is the reader's column `from[o]`.
 */
final class FlaggedRow extends InternalRow {
  private static final long serialVersionUID = 1L;
  private final InternalRow row;
  private final int[] from;
  private final int flagAt;
  private final boolean deleted;

  FlaggedRow(InternalRow row, int[] from, int flagAt, boolean deleted) {
    this.row = row;
    this.from = from;
    this.flagAt = flagAt;
    this.deleted = deleted;
  }

  @Override public int numFields() { return from.length; }
  @Override public void setNullAt(int i) { throw new UnsupportedOperationException(); }
  @Override public void update(int i, Object value) { throw new UnsupportedOperationException(); }
  @Override public InternalRow copy() { return new FlaggedRow(row.copy(), from, flagAt, deleted); }

  @Override public boolean isNullAt(int o) { return o != flagAt && row.isNullAt(from[o]); }
  @Override public boolean getBoolean(int o) { return o == flagAt ? deleted : row.getBoolean(from[o]); }
  @Override public byte getByte(int o) { return row.getByte(from[o]); }
  @Override public short getShort(int o) { return row.getShort(from[o]); }
  @Override public int getInt(int o) { return row.getInt(from[o]); }
  @Override public long getLong(int o) { return row.getLong(from[o]); }
  @Override public float getFloat(int o) { return row.getFloat(from[o]); }
  @Override public double getDouble(int o) { return row.getDouble(from[o]); }
  @Override public Decimal getDecimal(int o, int precision, int scale) { return row.getDecimal(from[o], precision, scale); }
  @Override public UTF8String getUTF8String(int o) { return row.getUTF8String(from[o]); }
  @Override public byte[] getBinary(int o) { return row.getBinary(from[o]); }
  @Override public BinaryView getBinaryView(int o) { return row.getBinaryView(from[o]); }
  @Override public CalendarInterval getInterval(int o) { return row.getInterval(from[o]); }
  @Override public TimestampNanosVal getTimestampNTZNanos(int o) { return row.getTimestampNTZNanos(from[o]); }
  @Override public TimestampNanosVal getTimestampLTZNanos(int o) { return row.getTimestampLTZNanos(from[o]); }
  @Override public VariantVal getVariant(int o) { return row.getVariant(from[o]); }
  @Override public InternalRow getStruct(int o, int numFields) { return row.getStruct(from[o], numFields); }
  @Override public ArrayData getArray(int o) { return row.getArray(from[o]); }
  @Override public MapData getMap(int o) { return row.getMap(from[o]); }
  @Override public Object get(int o, DataType type) { return o == flagAt ? (Object) deleted : row.get(from[o], type); }
}
