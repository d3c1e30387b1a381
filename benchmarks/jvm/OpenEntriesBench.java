package lambdaline.bench;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.ListState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/** benchmarks/plate_state.py's processor in Java: per plate its open entries, a timer each. */
public final class OpenEntriesBench extends StatefulProcessor<String, Row, Row> {
  private static final StructType OUT =
      new StructType().add("plate", DataTypes.StringType).add("open", DataTypes.LongType);

  private final long timeoutMs;
  private transient ListState<Long> entries;

  private OpenEntriesBench(long timeoutMs) {
    this.timeoutMs = timeoutMs;
  }

  public static Dataset<Row> apply(Dataset<Row> rows, long timeoutMs) {
    return rows.groupByKey(
            (MapFunction<Row, String>) row -> row.getString(row.fieldIndex("plate")),
            Encoders.STRING())
        .transformWithState(
            new OpenEntriesBench(timeoutMs), TimeMode.EventTime(), OutputMode.Append(),
            Encoders.row(OUT));
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    entries = getHandle().getListState("entries", Encoders.LONG(), TTLConfig.NONE());
  }

  @Override
  public Iterator<Row> handleInputRows(String key, Iterator<Row> rows, TimerValues timerValues) {
    List<Long> held = new ArrayList<>();
    entries.get().foreach(held::add);
    while (rows.hasNext()) {
      Row row = rows.next();
      long entryMs = row.getTimestamp(row.fieldIndex("timestamp")).getTime();
      entries.appendValue(entryMs);
      getHandle().registerTimer(entryMs + timeoutMs);
      held.add(entryMs);
    }
    return single(RowFactory.create(key, (long) held.size()));
  }

  @Override
  public Iterator<Row> handleExpiredTimer(
      String key, TimerValues timerValues, ExpiredTimerInfo expiredTimerInfo) {
    long expiry = expiredTimerInfo.getExpiryTimeInMs();
    List<Long> kept = new ArrayList<>();
    entries.get().foreach(entry -> { if (entry + timeoutMs > expiry) kept.add(entry); return null; });
    if (kept.isEmpty()) {
      entries.clear();
    } else {
      entries.put(kept.toArray(new Long[0]));
    }
    return single(RowFactory.create(key, (long) kept.size()));
  }

  private static Iterator<Row> single(Row row) {
    return CollectionConverters.asScala(List.of(row).iterator());
  }
}
