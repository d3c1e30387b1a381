package lambdaline.speed;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Each plate's sessions: runs of its entries less than the gap apart, as Spark's {@code
 * session_window} makes them (an entry's session is [entry, entry + gap), overlapping ones are
 * one). A session is written once, when the watermark W passes its end (its last entry + gap):
 * no entry can extend it then. Its booths are its entries' in entry order (ties by event id).
 *
 * <p>State: {@code plate_sessions}, one value per plate: its open sessions (bounds, count,
 * toll), their entries, and its one pending timer. (Appending the entries to a list state
 * instead would cost a read and a write more per entry: Spark keeps a count beside each list.)
 * The timer is registered at the earliest open session's end; when it fires and the session
 * has grown since, it is registered again at the new end.
 */
final class Sessions {
  private static final StructType OPEN =
      new StructType()
          .add("start", DataTypes.LongType, false)
          .add("last", DataTypes.LongType, false)
          .add("count", DataTypes.LongType, false)
          .add("cents", DataTypes.LongType, false);

  static final StructType ENTRY =
      new StructType()
          .add("time", DataTypes.LongType, false)
          .add("event_id", DataTypes.StringType)
          .add("booth_id", DataTypes.StringType);

  static final StructType STATE =
      new StructType()
          .add("open", DataTypes.createArrayType(OPEN, false))
          .add("entries", DataTypes.createArrayType(ENTRY, false))
          .add("timer_ms", DataTypes.LongType);

  /** An entry of a session. */
  record Entry(long time, String eventId, String booth, long cents) {
    static final Comparator<Entry> ORDER =
        Comparator.comparingLong(Entry::time)
            .thenComparing(Entry::eventId, Comparator.nullsFirst(Comparator.naturalOrder()))
            .thenComparing(Entry::booth, Comparator.nullsFirst(Comparator.naturalOrder()));
  }

  /** One open session. */
  static final class Open {
    long start;
    long last;
    long count;
    long cents;
  }

  private final OperatorConfig.Sessions config;
  private final StatefulProcessorHandle handle;
  private final ValueState<Row> state;

  Sessions(OperatorConfig.Sessions config, StatefulProcessorHandle handle) {
    this.config = config;
    this.handle = handle;
    this.state = handle.getValueState("plate_sessions", Encoders.row(STATE), TTLConfig.NONE());
  }

  void onEntries(String plate, List<Entry> arrived, long watermark, long version, List<Row> out) {
    Row row = state.get();
    List<Open> open = row == null ? new ArrayList<>() : open(row);
    List<Row> entries = row == null ? new ArrayList<>() : new ArrayList<>(row.<Row>getList(1));
    Long timer = row == null || row.isNullAt(2) ? null : row.getLong(2);
    long gap = config.gapMs();
    for (Entry entry : arrived) {
      Open joined = new Open();
      joined.start = entry.time();
      joined.last = entry.time();
      joined.count = 1;
      joined.cents = entry.cents();
      List<Open> kept = new ArrayList<>();
      for (Open session : open) {
        // [entry, entry + gap) overlaps [start, last + gap)
        if (entry.time() < session.last + gap && session.start < entry.time() + gap) {
          joined.start = Math.min(joined.start, session.start);
          joined.last = Math.max(joined.last, session.last);
          joined.count += session.count;
          joined.cents += session.cents;
        } else {
          kept.add(session);
        }
      }
      kept.add(joined);
      open = kept;
      entries.add(RowFactory.create(entry.time(), entry.eventId(), entry.booth()));
    }
    if (timer == null) {
      timer = earliestEnd(open);
      handle.registerTimer(timer);
    }
    state.update(toRow(open, entries, timer));
  }

  void onTimer(String plate, long firedMs, long watermark, long version, List<Row> out) {
    Row row = state.get();
    if (row == null || row.isNullAt(2) || row.getLong(2) > watermark) {
      return; // its own timer is still to come
    }
    List<Open> open = open(row);
    long gap = config.gapMs();
    List<Open> closing = new ArrayList<>();
    List<Open> still = new ArrayList<>();
    for (Open session : open) {
      (session.last + gap <= watermark ? closing : still).add(session);
    }
    List<Entry> entries = new ArrayList<>();
    for (Row e : row.<Row>getList(1)) {
      entries.add(new Entry(e.getLong(0), e.getString(1), e.getString(2), 0));
    }
    List<Row> remaining = new ArrayList<>();
    if (!closing.isEmpty()) {
      entries.sort(Entry.ORDER);
      for (Open session : closing) {
        List<String> booths = new ArrayList<>();
        for (Entry entry : entries) {
          if (session.start <= entry.time() && entry.time() <= session.last) {
            booths.add(entry.booth());
          }
        }
        out.add(
            Output.session(
                config.view(), plate, session.start, session.last + gap, session.count,
                session.cents, booths, version));
      }
    }
    for (Entry entry : entries) {
      boolean closed = false;
      for (Open session : closing) {
        closed |= session.start <= entry.time() && entry.time() <= session.last;
      }
      if (!closed) {
        remaining.add(RowFactory.create(entry.time(), entry.eventId(), entry.booth()));
      }
    }
    if (still.isEmpty()) {
      state.clear();
      return;
    }
    long next = earliestEnd(still);
    if (next != firedMs) {
      handle.registerTimer(next);
    }
    state.update(toRow(still, remaining, next));
  }

  private long earliestEnd(List<Open> open) {
    long end = Long.MAX_VALUE;
    for (Open session : open) {
      end = Math.min(end, session.last + config.gapMs());
    }
    return end;
  }

  private static List<Open> open(Row row) {
    List<Open> open = new ArrayList<>();
    for (Row r : row.<Row>getList(0)) {
      Open session = new Open();
      session.start = r.getLong(0);
      session.last = r.getLong(1);
      session.count = r.getLong(2);
      session.cents = r.getLong(3);
      open.add(session);
    }
    return open;
  }

  private static Row toRow(List<Open> open, List<Row> entries, Long timer) {
    List<Row> rows = new ArrayList<>(open.size());
    for (Open session : open) {
      rows.add(RowFactory.create(session.start, session.last, session.count, session.cents));
    }
    return RowFactory.create(
        CollectionConverters.asScala(rows).toSeq(), CollectionConverters.asScala(entries).toSeq(),
        timer);
  }
}
