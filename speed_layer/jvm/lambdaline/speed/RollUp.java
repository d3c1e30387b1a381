package lambdaline.speed;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A roll-up of entries per group (a booth): their count, toll and first and last time in
 * buckets of {@code bucketMs} aligned to the epoch (a common divisor of every window's size and
 * slide), and each configured window's row the sum of its buckets. A micro-batch writes the row
 * of every window its entries changed, with a version past the group's last.
 *
 * <p>An entry at or before the watermark W is not taken: a window final under W never changes.
 * A copy of an entry taken (its event id seen) is not taken again: the group keeps the ids of
 * the entries after W, and an entry at or before W is late anyway. A bucket is kept until W
 * passes the end of the latest window holding it. One event-time timer per group at a time,
 * registered at the next moment something can be dropped and registered again when it fires.
 */
final class RollUp {
  private static final StructType BUCKET =
      new StructType()
          .add("start", DataTypes.LongType, false)
          .add("count", DataTypes.LongType, false)
          .add("cents", DataTypes.LongType, false)
          .add("first", DataTypes.LongType, false)
          .add("last", DataTypes.LongType, false);

  static final StructType STATE =
      new StructType()
          .add("buckets", DataTypes.createArrayType(BUCKET, false))
          .add("version", DataTypes.LongType, false)
          .add("timer_ms", DataTypes.LongType);

  private final OperatorConfig.RollUpConfig config;
  private final long sweepMs;
  private final StatefulProcessorHandle handle;
  private final ValueState<Row> groups;
  private final MapState<String, Long> seen;
  private Input.Columns columns;

  RollUp(OperatorConfig.RollUpConfig config, long sweepMs, StatefulProcessorHandle handle) {
    this.config = config;
    this.sweepMs = sweepMs;
    this.handle = handle;
    this.groups = handle.getValueState("roll_up", Encoders.row(STATE), TTLConfig.NONE());
    this.seen =
        handle.getMapState("roll_up_seen", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
  }

  private static long floor(long t, long step) {
    return Math.floorDiv(t, step) * step;
  }

  /** When a bucket can no longer change a window: the end of the latest window holding it. */
  private long deadline(long bucketStart) {
    long deadline = Long.MIN_VALUE;
    for (OperatorConfig.Window window : config.windows) {
      deadline = Math.max(deadline, floor(bucketStart, window.slideMs()) + window.sizeMs());
    }
    return deadline;
  }

  void onRows(String group, Iterator<Row> rows, TimerValues timers, List<Row> out) {
    long watermark = timers.getCurrentWatermarkInMs();
    Group held = Group.of(groups.get());
    List<TreeSet<Long>> changed = new ArrayList<>();
    for (int i = 0; i < config.windows.size(); i++) {
      changed.add(new TreeSet<>());
    }
    long leastTaken = Long.MAX_VALUE;
    while (rows.hasNext()) {
      Row row = rows.next();
      columns = Input.Columns.of(columns, row);
      long t = row.getLong(columns.time);
      String id = row.getString(columns.eventId);
      if (t <= watermark || seen.containsKey(id)) {
        continue;
      }
      seen.updateValue(id, t);
      leastTaken = Math.min(leastTaken, t);
      held.add(floor(t, config.bucketMs), t, row.getLong(columns.toll));
      for (int i = 0; i < config.windows.size(); i++) {
        OperatorConfig.Window window = config.windows.get(i);
        // the windows holding t: starts in (t - size, t], multiples of the slide
        for (long s = floor(t, window.slideMs()); s > t - window.sizeMs(); s -= window.slideMs()) {
          changed.get(i).add(s);
        }
      }
    }
    if (leastTaken == Long.MAX_VALUE) {
      return;
    }
    held.version = Math.max(held.version + 1, timers.getCurrentProcessingTimeInMs());
    for (int i = 0; i < config.windows.size(); i++) {
      OperatorConfig.Window window = config.windows.get(i);
      for (long start : changed.get(i)) {
        out.add(held.window(window, group, start));
      }
    }
    held.forget(watermark, this);
    if (held.timerMs == null) {
      held.timerMs = next(held, leastTaken);
      handle.registerTimer(held.timerMs);
    }
    groups.update(held.toRow());
  }

  void onTimer(String group, TimerValues timers, List<Row> out) {
    Group held = Group.of(groups.get());
    long watermark = timers.getCurrentWatermarkInMs();
    held.timerMs = null; // a fired timer is gone
    held.forget(watermark, this);
    long leastSeen = Long.MAX_VALUE;
    List<String> gone = new ArrayList<>();
    for (scala.collection.Iterator<scala.Tuple2<String, Long>> ids = seen.iterator();
        ids.hasNext(); ) {
      scala.Tuple2<String, Long> id = ids.next();
      if (id._2() <= watermark) {
        gone.add(id._1());
      } else {
        leastSeen = Math.min(leastSeen, id._2());
      }
    }
    for (String id : gone) {
      seen.removeKey(id);
    }
    if (held.buckets.isEmpty() && leastSeen == Long.MAX_VALUE) {
      groups.clear();
      return;
    }
    held.timerMs = next(held, leastSeen);
    handle.registerTimer(held.timerMs);
    groups.update(held.toRow());
  }

  /**
   * The group's next timer: its oldest bucket's deadline, or a sweep of the ids it holds once W
   * can have passed {@code sweepMs} of them, whichever comes first.
   */
  private long next(Group held, long leastSeen) {
    long next = held.buckets.isEmpty() ? Long.MAX_VALUE : deadline(held.buckets.firstKey());
    if (leastSeen != Long.MAX_VALUE) {
      next = Math.min(next, leastSeen + sweepMs);
    }
    return next;
  }

  /** Entries of one bucket of time. */
  static final class Bucket {
    long count;
    long cents;
    long first = Long.MAX_VALUE;
    long last = Long.MIN_VALUE;
  }

  /** One group's buckets by start, the version of its last rows, its pending timer. */
  static final class Group {
    final TreeMap<Long, Bucket> buckets = new TreeMap<>();
    long version;
    Long timerMs;

    static Group of(Row row) {
      Group group = new Group();
      if (row == null) {
        return group;
      }
      for (Row b : row.<Row>getList(0)) {
        Bucket bucket = new Bucket();
        bucket.count = b.getLong(1);
        bucket.cents = b.getLong(2);
        bucket.first = b.getLong(3);
        bucket.last = b.getLong(4);
        group.buckets.put(b.getLong(0), bucket);
      }
      group.version = row.getLong(1);
      group.timerMs = row.isNullAt(2) ? null : row.getLong(2);
      return group;
    }

    Row toRow() {
      List<Row> rows = new ArrayList<>(buckets.size());
      for (Map.Entry<Long, Bucket> e : buckets.entrySet()) {
        Bucket b = e.getValue();
        rows.add(RowFactory.create(e.getKey(), b.count, b.cents, b.first, b.last));
      }
      return RowFactory.create(CollectionConverters.asScala(rows).toSeq(), version, timerMs);
    }

    void add(long bucketStart, long t, long cents) {
      Bucket bucket = buckets.computeIfAbsent(bucketStart, start -> new Bucket());
      bucket.count += 1;
      bucket.cents += cents;
      bucket.first = Math.min(bucket.first, t);
      bucket.last = Math.max(bucket.last, t);
    }

    /** A window's row: the sum of its buckets. */
    Row window(OperatorConfig.Window window, String group, long start) {
      long end = start + window.sizeMs();
      long count = 0, cents = 0, first = Long.MAX_VALUE, last = Long.MIN_VALUE;
      for (Bucket b : buckets.subMap(start, true, end, false).values()) {
        count += b.count;
        cents += b.cents;
        first = Math.min(first, b.first);
        last = Math.max(last, b.last);
      }
      return Output.window(
          window.view(), group, start, end, count, cents,
          window.withTimes() ? first : null, window.withTimes() ? last : null, version);
    }

    /** Drops the buckets no entry after the watermark can add to a window with. */
    void forget(long watermark, RollUp rollUp) {
      buckets.entrySet().removeIf(e -> rollUp.deadline(e.getKey()) <= watermark);
    }
  }
}
